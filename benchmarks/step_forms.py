"""The training step decides what recompute saves: pool peaks for every form of `runner_wrapper`.

    python benchmarks/step_forms.py [--only FORM ...] [--recompute none full cell] [--exact]

For each step form MindFormers accepts (no `runner_wrapper` section; a number, a
DynamicLossScaleUpdateCell or a FixedLossScaleUpdateCell as `scale_sense`; clip-grad on or off) and
each recompute (none, full, the MLP cell), a config derived from `configs/llama_tiny.yaml` (4 layers,
hidden 256, seq 256, batch 4, vocab 512, float32) is trained one step by the launcher in a child
process (`estimate --measure`), and its memory-pool peak is printed beside the estimate, with each
recompute's peak as a ratio of no recompute in the same form.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mf_memopt.estimate import estimate_config  # noqa: E402
from mf_memopt.estimate.measure import measure_peak  # noqa: E402

DYNAMIC = {"type": "DynamicLossScaleUpdateCell", "loss_scale_value": 65536, "scale_factor": 2, "scale_window": 1000}
FIXED = {"type": "FixedLossScaleUpdateCell", "loss_scale_value": 1024}
# name -> runner_wrapper (None: no section, MindFormers' default step)
FORMS = {
    "no runner_wrapper": None,
    "scale 1, clip": {"type": "MFTrainOneStepCell", "scale_sense": 1.0, "use_clip_grad": True},
    "scale 1, no clip": {"type": "MFTrainOneStepCell", "scale_sense": 1.0, "use_clip_grad": False},
    "dynamic scale, clip": {"type": "MFTrainOneStepCell", "scale_sense": DYNAMIC, "use_clip_grad": True},
    "dynamic scale, no clip": {"type": "MFTrainOneStepCell", "scale_sense": DYNAMIC, "use_clip_grad": False},
    "fixed scale, clip": {"type": "MFTrainOneStepCell", "scale_sense": FIXED, "use_clip_grad": True,
                          "max_grad_norm": 0.5},
}
RECOMPUTE = {"none": {"recompute": False, "select_recompute": False},
             "full": {"recompute": True, "select_recompute": False},
             "cell": {"recompute": False, "select_recompute": {"feed_forward": True}}}


def config_for(form: str, recompute: str, directory: Path) -> Path:
    data = yaml.safe_load((ROOT / "configs" / "llama_tiny.yaml").read_text())
    data["model"]["model_config"].update(vocab_size=512)
    data["runner_config"]["batch_size"] = 4
    data["model"]["model_config"]["batch_size"] = 4
    if FORMS[form] is None:
        data.pop("runner_wrapper", None)
    else:
        data["runner_wrapper"] = FORMS[form]
    data["recompute_config"] = {**RECOMPUTE[recompute], "select_comm_recompute": False}
    path = directory / f"{form.replace(' ', '_').replace(',', '')}__{recompute}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=list(FORMS), help="step forms to run")
    parser.add_argument("--recompute", nargs="*", default=list(RECOMPUTE), help="recompute settings to run")
    parser.add_argument("--exact", action="store_true", help="replay the allocation log for the peak to the byte")
    args = parser.parse_args(argv)
    rows = [["step form", "recompute", "measured MiB", "vs none", "estimated MiB", "error"]]
    with tempfile.TemporaryDirectory(prefix="mf_memopt_forms_") as tmp:
        for form in args.only:
            baseline = None
            for recompute in args.recompute:
                path = config_for(form, recompute, Path(tmp))
                measured = measure_peak(path, runtime="cpu", exact=args.exact)
                peak = (measured.exact_bytes or measured.peak_bytes + 2**19) / 2**20
                estimated = estimate_config(path, runtime="cpu").stages[0].peak.peak / 2**20
                baseline = peak if recompute == "none" else baseline
                ratio = f"{peak / baseline:.2f}x" if baseline else "-"
                rows.append([form, recompute, f"{peak:.2f}", ratio, f"{estimated:.1f}", f"{estimated / peak - 1:+.1%}"])
                print("  ".join(rows[-1]), flush=True)
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    print()
    print("\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
