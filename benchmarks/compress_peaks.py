"""(d3) What compressing the matmul inputs does to the memory-pool peak, against no compression.

Each variant is the step-forms config (`step_forms.config_for`: the tiny or held-out shape, a dynamic
loss scale with clip-grad, no recompute) with one `compress_config`, trained one step by the launcher in
a child process; the peak is replayed from the allocation log to the byte (`estimate --measure --exact`)
and printed beside `estimate --runtime cpu` and the ratio to the uncompressed peak of the same shape.

    python benchmarks/compress_peaks.py                       # the legacy Llama, tiny shape, every variant
    python benchmarks/compress_peaks.py --model qwen3 --shape held-out --variants none int4-all
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml

from step_forms import MODELS, _print, config_for

from mf_memopt.estimate import estimate_config
from mf_memopt.runs.measure import measure_peak

MiB = 2**20
FORM = "dynamic scale, clip"
# variant -> per model: the op_compress entries (None: no compression), or a whole compress_config
VARIANTS = {
    "none": {"llama": None, "qwen3": None},
    "int8-mlp": {"llama": [("feed_forward\\.(w1|w2|w3)", "int8")], "qwen3": [("mlp\\.linear_fc(1|2)", "int8")]},
    "int4-attention": {"llama": [("attention\\.(wq|wk|wv|wo)", "int4")],
                       "qwen3": [("self_attention\\.(linear_qkv|linear_proj)", "int4")]},
    "int4-mlp": {"llama": [("feed_forward\\.(w1|w2|w3)", "int4")], "qwen3": [("mlp\\.linear_fc(1|2)", "int4")]},
    "int4-all": {"llama": [("attention\\.(wq|wk|wv|wo)", "int4"), ("feed_forward\\.(w1|w2|w3)", "int4")],
                 "qwen3": [("self_attention\\.(linear_qkv|linear_proj)", "int4"), ("mlp\\.linear_fc(1|2)", "int4")]},
    "int2-all": {"llama": [("attention\\.(wq|wk|wv|wo)", "int2"), ("feed_forward\\.(w1|w2|w3)", "int2")],
                 "qwen3": [("self_attention\\.(linear_qkv|linear_proj)", "int2"), ("mlp\\.linear_fc(1|2)", "int2")]},
    "lossless": {"llama": {"compress": True, "compress_dense": "level0"}},
}


def variant_config(variant: str, model: str, shape: str, directory: Path) -> Path | None:
    """The step-forms config of `model` and `shape` with the variant's compress_config (None: not for this model)."""
    if model not in VARIANTS[variant]:
        return None
    path = config_for(FORM, "none", directory, shape, model)
    data = yaml.safe_load(path.read_text())
    section = VARIANTS[variant][model]
    if isinstance(section, dict):
        data["compress_config"] = dict(section)
    elif section is not None:
        data["compress_config"] = {"compress": True, "op_compress": [
            {"op_name": pattern, "method": method, "layers": True} for pattern, method in section]}
    target = directory / f"{model}_{shape}__{variant}.yaml"
    target.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, default="llama")
    parser.add_argument("--shape", choices=("tiny", "held-out"), default="tiny")
    parser.add_argument("--variants", nargs="*", choices=VARIANTS, default=list(VARIANTS))
    args = parser.parse_args(argv)
    variants = ["none", *[variant for variant in args.variants if variant != "none"]]
    rows = [["variant", "measured MiB", "vs none", "estimated MiB", "error"]]
    baseline = None
    with tempfile.TemporaryDirectory(prefix="mf_memopt_compress_peaks_") as tmp:
        for variant in variants:
            path = variant_config(variant, args.model, args.shape, Path(tmp))
            if path is None:
                continue
            measured = measure_peak(path, runtime="cpu", exact=True)
            peak = measured.exact_bytes / MiB
            baseline = peak if baseline is None else baseline
            estimate = estimate_config(path, runtime="cpu").stages[0].peak.peak / MiB
            rows.append([variant, f"{peak:.2f}", f"{peak / baseline:.3f}x", f"{estimate:.1f}",
                         f"{estimate / peak - 1:+.1%}"])
            print("  ".join(rows[-1]), flush=True)
    _print(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
