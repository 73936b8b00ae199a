"""(d) Activation compression: pool peak, step time and bytes per tensor per method.

Baseline: the same model and data without compression (and without recompute). Each
variant is a copy of the YAML whose `compress_config` differs; in its own process,
`session.prepare` builds the model and applies the plan exactly as the launcher does, and
`train_session` trains it (TrainOneStepCell, AdamW at a fixed learning rate, the launcher's
generated tokens), so the memory-pool peak MindSpore prints at exit belongs to that variant
alone. Losses are recorded as full-precision floats, so "identical" means bit-identical.

    python -m benchmarks.compress [--config benchmarks/llama_medium.yaml] [--steps 4] [--only memory|bytes]

What quantisation costs in model quality is measured on real text by `benchmarks/compress_quality.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from benchmarks.common import load_note, print_table, ratio
from mf_memopt.runs.measure import CPU_PEAK

REPO = Path(__file__).resolve().parent.parent
MLP = r"feed_forward\.(w1|w2|w3)"
VARIANTS = {
    "baseline": None,
    "lossless (compress_dense: level0)": {"compress": True, "compress_dense": "level0"},
    "int8": {"compress": True, "op_compress": [{"op_name": MLP, "method": "int8", "layers": True}]},
    "int4": {"compress": True, "op_compress": [{"op_name": MLP, "method": "int4", "layers": True}]},
    "int2": {"compress": True, "op_compress": [{"op_name": MLP, "method": "int2", "layers": True}]},
}
SELECTED = list(VARIANTS)
PEAK = CPU_PEAK  # MindSpore's memory-pool report, as `estimate --measure` reads it


def variant_yaml(config: Path, section: dict | None, out: Path, model: dict | None = None) -> Path:
    data = yaml.safe_load(config.read_text())
    data["model"]["model_config"].update(model or {})
    if model:
        data["train_dataset"]["data_loader"]["dataset_dir"] = str(out.with_suffix(".mindrecord"))
    data["recompute_config"] = {"recompute": False, "select_recompute": False, "select_comm_recompute": False}
    data.pop("compress_config", None)
    if section is not None:
        data["compress_config"] = section
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def train_worker(config: str, steps: int, result: str) -> None:
    """Child process: build the model and apply the plan as the launcher does, then train `steps` steps."""
    from mf_memopt.runtime.session import prepare

    losses, milliseconds = train_session(prepare(config), steps)
    Path(result).write_text(json.dumps({"losses": losses, "ms": milliseconds}))


def train_session(session, steps: int, *, learning_rate: float = 5e-3, num_samples: int = 32,
                  seed: int = 1234) -> tuple[list[float], list[float]]:
    """Train the prepared model for `steps` steps; (losses, step milliseconds).

    The model and its compression come from `session.prepare`, as the launcher builds them;
    the loop is a plain `TrainOneStepCell` with AdamW at a fixed learning rate over the
    launcher's generated tokens (`mf_memopt.runtime.data.synthetic_tokens`, 32 sequences, seed 1234),
    so that every variant sees the same batches and the losses can be compared bit for bit.
    """
    import time

    import mindspore as ms
    from mindspore import nn

    from mf_memopt.runtime.data import synthetic_tokens

    model_config = session.config.model.model_config
    tokens = synthetic_tokens(num_samples, model_config.seq_length, model_config.vocab_size, seed)
    batch = model_config.batch_size
    optimizer = nn.AdamWeightDecay(session.network.trainable_params(), learning_rate=learning_rate,
                                   beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0)
    step_cell = nn.TrainOneStepCell(session.network, optimizer)
    step_cell.set_train(True)
    losses, times = [], []
    for step in range(steps):
        start = step * batch % (num_samples - num_samples % batch)
        inputs = ms.Tensor(tokens[start:start + batch])
        began = time.perf_counter()
        losses.append(float(step_cell(inputs).asnumpy().reshape(-1)[0]))
        times.append((time.perf_counter() - began) * 1000)
    return losses, times


def run_variant(config: Path, steps: int, work: Path, name: str) -> dict:
    result = work / f"{_slug(name)}.json"
    env = dict(os.environ, GLOG_v="2", MS_SUBMODULE_LOG_v="{PRE_ACT:1}", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.compress", "--worker", str(config), str(steps),
                           str(result)], cwd=REPO, env=env, capture_output=True, text=True)
    peaks = PEAK.findall(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not peaks:
        raise RuntimeError(f"{name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    data = json.loads(result.read_text())
    data["peak_mb"] = int(peaks[-1])
    return data


def estimated_peak_mb(config: Path) -> float:
    from mf_memopt.estimate.core import estimate_config

    return estimate_config(config, runtime="cpu").stages[0].peak.peak / 2 ** 20


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def memory_table(config: Path, steps: int, work: Path) -> dict[str, dict]:
    results = {}
    for name, section in VARIANTS.items():
        if name not in SELECTED:
            continue
        path = variant_yaml(config, section, work / f"{_slug(name)}.yaml")
        results[name] = run_variant(path, steps, work, name)
        results[name]["estimate_mb"] = estimated_peak_mb(path)
        print(f"  {name}: peak {results[name]['peak_mb']} MB", flush=True)
    base = results["baseline"]
    rows = []
    for name, data in results.items():
        later = data["ms"][1:] or data["ms"]
        step = sum(later) / len(later)
        measured_saving = base["peak_mb"] - data["peak_mb"]
        predicted_saving = base["estimate_mb"] - data["estimate_mb"]
        share = f"{measured_saving / predicted_saving:.0%}" if predicted_saving > 0.5 else "-"
        same = "identical" if data["losses"] == base["losses"] else \
            f"{(data['losses'][-1] / base['losses'][-1] - 1) * 100:+.3f}%"
        rows.append((name, data["peak_mb"], ratio(data["peak_mb"], base["peak_mb"]), f"{data['estimate_mb']:.1f}",
                     f"{predicted_saving:.1f}", measured_saving, share, f"{step:.0f}",
                     ratio(step, sum(base["ms"][1:]) / max(len(base["ms"]) - 1, 1)), same))
    print_table(f"(d) activation compression of the MLP, {config.name}, {steps} steps; {load_note()}",
                ("variant", "peak MB", "vs baseline", "estimate MB", "predicted saving MB", "measured saving MB",
                 "measured / predicted", "step ms", "vs baseline", f"loss at step {steps}"), rows)
    return results


def bytes_table() -> None:
    """Bytes of the compressed copy of one tensor, as stored by the codec, against the formula."""
    import mindspore as ms
    import numpy as np

    from mf_memopt.compress.codec import GroupCodec
    from mf_memopt.compress.methods import bits_per_element, stored_bytes

    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    shape = (1024, 1376)                                   # the input of w2 in llama_medium (b*s, ffn)
    x = ms.Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    rows = []
    for method, bits in (("int8", 8), ("int4", 4), ("int2", 2)):
        codec = GroupCodec(bits, 256)
        parts = codec.compress(x)
        stored = sum(part.nbytes for part in parts)
        restored = codec.decompress(*parts, shape, ms.float32).asnumpy()
        error = float(np.abs(restored - x.asnumpy()).mean())
        rows.append((method, x.nbytes, stored, stored_bytes(method, x.size), f"{8 * stored / x.size:.4f}",
                     f"{bits_per_element(method):.4f}", f"{x.nbytes / stored:.1f}x", f"{error:.4f}"))
    print_table(f"(d) bytes per compressed tensor, float32 {shape} (group 256)",
                ("method", "float32 bytes", "stored bytes", "formula bytes", "bits/element", "formula bits",
                 "ratio", "mean abs error"), rows)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--worker":
        train_worker(args[1], int(args[2]), args[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO / "benchmarks" / "llama_medium.yaml")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--only", choices=("memory", "bytes"))
    parser.add_argument("--pattern", default=MLP, help=f"op_name of the quantised variants (default {MLP})")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS),
                        help="variants to run (the baseline always runs)")
    options = parser.parse_args(args)
    for section in VARIANTS.values():
        for entry in (section or {}).get("op_compress", []):
            entry["op_name"] = options.pattern
    SELECTED[:] = ["baseline", *(name for name in options.variants if name != "baseline")]
    with tempfile.TemporaryDirectory(prefix="mf_memopt_compress_") as tmp:
        if options.only in (None, "bytes"):
            bytes_table()
        if options.only in (None, "memory"):
            memory_table(options.config, options.steps, Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
