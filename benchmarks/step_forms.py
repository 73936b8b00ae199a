"""The training step decides what recompute saves: pool peaks for every form of `runner_wrapper`.

    python benchmarks/step_forms.py [--model llama|qwen3] [--only FORM ...] [--recompute none full cell] [--exact]
    python benchmarks/step_forms.py --auto [--only FORM ...]

For each step form MindFormers accepts (no `runner_wrapper` section; a number, a
DynamicLossScaleUpdateCell or a FixedLossScaleUpdateCell as `scale_sense`; clip-grad on or off) and
each recompute (none, full, the MLP cell), a config derived from `configs/llama_tiny.yaml` (4 layers,
hidden 256, seq 256, batch 4, vocab 512, float32) is trained one step by the launcher in a child
process (`estimate --measure`), and its memory-pool peak is printed beside the estimate, with each
recompute's peak as a ratio of no recompute in the same form.

`--model qwen3`: the same on MindFormers' mcore model, a config derived from `configs/qwen3_tiny.yaml`
(4 layers, hidden 256, intermediate 512, 4 heads over 2 KV heads of 64, seq 256, batch 4, vocab 512,
float32), its MLP cell `mlp`; with `--auto`, its held-out shape is `QWEN3_HELD_OUT`.

`--auto`: whether `auto --runtime cpu` plans hold under a step form. For the forms given (default: a
dynamic loss scale with and without clip-grad, and no `runner_wrapper` section) and two shapes (the
config above, and `HELD_OUT`, a shape drawn for this check with MindFormers' default float16 compute),
the no-recompute and full-recompute peaks are measured, `auto` plans for budgets a quarter, half and
three quarters of the way between them (open loop, its default margin), and the written plan is
trained and its pool peak compared with the budget.
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
from mf_memopt.runs.measure import measure_peak  # noqa: E402

MiB = 2**20

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
AUTO_FORMS = ("dynamic scale, clip", "dynamic scale, no clip", "no runner_wrapper")
# 6 layers, hidden 384, 6 heads over 2 KV heads, seq 192, batch 3, vocab 3000, float16 compute (the defaults)
HELD_OUT = {"num_layers": 6, "hidden_size": 384, "num_heads": 6, "n_kv_heads": 2, "seq_length": 192, "batch_size": 3,
            "vocab_size": 3000, "compute_dtype": "float16", "layernorm_compute_type": "float32",
            "softmax_compute_type": "float32", "rotary_dtype": "float32", "param_init_type": "float32"}
# 5 layers, hidden 320, 5 heads of 64 over 1 KV head, intermediate 960, seq 160, batch 3, vocab 3000, float16 compute
QWEN3_HELD_OUT = {"num_hidden_layers": 5, "hidden_size": 320, "num_attention_heads": 5, "num_key_value_heads": 1,
                  "head_dim": 64, "intermediate_size": 960, "seq_length": 160, "max_position_embeddings": 160,
                  "batch_size": 3, "vocab_size": 3000, "compute_dtype": "float16"}
# model -> its tiny config, its MLP cell and its shapes (an mcore model_config has no batch_size: runner_config's is
# the batch)
MODELS = {"llama": ("llama_tiny.yaml", "feed_forward", {"tiny": {"vocab_size": 512, "batch_size": 4},
                                                         "held-out": HELD_OUT}),
          "qwen3": ("qwen3_tiny.yaml", "mlp", {"tiny": {"vocab_size": 512, "batch_size": 4},
                                               "held-out": QWEN3_HELD_OUT})}
RECOMPUTE = ("none", "full", "cell")


def config_for(form: str, recompute: str, directory: Path, shape: str = "tiny", model: str = "llama") -> Path:
    name, cell, shapes = MODELS[model]
    data = yaml.safe_load((ROOT / "configs" / name).read_text())
    model_config = data["model"]["model_config"]
    model_config.update({key: value for key, value in shapes[shape].items()
                         if key != "batch_size" or key in model_config})
    data["runner_config"]["batch_size"] = shapes[shape]["batch_size"]
    if FORMS[form] is None:
        data.pop("runner_wrapper", None)
    else:
        data["runner_wrapper"] = FORMS[form]
    data["recompute_config"] = {"recompute": recompute == "full",
                                "select_recompute": {cell: True} if recompute == "cell" else False,
                                "select_comm_recompute": False}
    path = directory / f"{model}_{shape}__{form.replace(' ', '_').replace(',', '')}__{recompute}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, default="llama",
                        help="llama (configs/llama_tiny.yaml) or qwen3 (configs/qwen3_tiny.yaml, mcore)")
    parser.add_argument("--only", nargs="*", help="step forms to run (default: every form; with --auto, AUTO_FORMS)")
    parser.add_argument("--recompute", nargs="*", choices=RECOMPUTE, default=list(RECOMPUTE),
                        help="recompute settings to run")
    parser.add_argument("--exact", action="store_true", help="replay the allocation log for the peak to the byte")
    parser.add_argument("--auto", action="store_true", help="check auto's plans under the step forms")
    args = parser.parse_args(argv)
    if args.auto:
        return auto_check(args.only or list(AUTO_FORMS), args.model)
    args.only = args.only or list(FORMS)
    rows = [["step form", "recompute", "measured MiB", "vs none", "estimated MiB", "error"]]
    with tempfile.TemporaryDirectory(prefix="mf_memopt_forms_") as tmp:
        for form in args.only:
            baseline = None
            for recompute in args.recompute:
                path = config_for(form, recompute, Path(tmp), model=args.model)
                measured = measure_peak(path, runtime="cpu", exact=args.exact)
                peak = (measured.exact_bytes or measured.peak_bytes + 2**19) / 2**20
                baseline = peak if recompute == "none" else baseline
                ratio = f"{peak / baseline:.2f}x" if baseline else "-"
                estimate = estimate_config(path, runtime="cpu").stages[0].peak.peak / 2**20
                rows.append([form, recompute, f"{peak:.2f}", ratio, f"{estimate:.1f}", f"{estimate / peak - 1:+.1%}"])
                print("  ".join(rows[-1]), flush=True)
    _print(rows)
    return 0


def auto_check(forms: list[str], model: str = "llama") -> int:
    from mf_memopt.auto import auto_plan

    rows = [["shape", "step form", "budget MiB", "plan", "predicted MiB", "measured MiB", "within"]]
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="mf_memopt_forms_auto_") as tmp:
        for shape in MODELS[model][2]:
            for form in forms:
                directory = Path(tmp) / shape / form.replace(" ", "_").replace(",", "")
                directory.mkdir(parents=True)
                none, full = (measure_peak(config_for(form, recompute, directory, shape, model),
                                           runtime="cpu").peak_bytes for recompute in ("none", "full"))
                rows.append([shape, form, "-", "none / full", "-", f"{none / MiB:.0f} / {full / MiB:.0f}", "-"])
                print("  ".join(rows[-1]), flush=True)
                for share in (0.25, 0.5, 0.75):
                    budget = (full + round(share * (none - full))) // MiB * MiB
                    plan = auto_plan(config_for(form, "none", directory, shape, model), budget=budget,
                                     runtime="cpu")
                    written = directory / f"auto_{share}.yaml"
                    written.write_text(plan.text, encoding="utf-8")
                    measured = measure_peak(written, runtime="cpu").peak_bytes
                    verdicts.append(measured <= budget)
                    counts = yaml.safe_load(plan.text)["recompute_config"]
                    rows.append([shape, form, f"{budget / MiB:.0f}", _plan_summary(counts),
                                 f"{plan.estimate.stages[0].peak.peak / MiB:.1f}", f"{measured / MiB:.0f}",
                                 "yes" if measured <= budget else "NO"])
                    print("  ".join(rows[-1]), flush=True)
    _print(rows)
    print(f"every plan within its budget: {'yes' if all(verdicts) else 'NO'} ({sum(verdicts)}/{len(verdicts)})")
    return 0 if all(verdicts) else 1


def _plan_summary(section: dict) -> str:
    full, select = section.get("recompute"), section.get("select_recompute")
    parts = [f"full {full}"] if full not in (False, None) else []
    if isinstance(select, dict):
        parts += [f"{name} {value}" for name, value in select.items()]
    return ", ".join(parts) or "nothing"


def _print(rows: list[list[str]]) -> None:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    print()
    print("\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows))


if __name__ == "__main__":
    sys.exit(main())
