"""(e2) Generated mcore configs (Qwen3, TeleChat3) and their measured memory-pool peaks, a held-out half included.

The CPU estimate of mcore layers was built on this sweep's build half; its held-out half was drawn and
measured before any mcore inventory existed (git log -p benchmarks/README.md has the history), and the `fresh`
set after the estimator was compared with it. The sweep varies:

* architecture: Qwen3 (q/k layernorm) or TeleChat3 (none);
* layers 2-6, hidden 64-768, heads and head_dim drawn apart (an mcore model's heads x head_dim need
  not equal hidden), key/value heads dividing the heads, intermediate_size 2-4 x hidden, seq 32-512,
  batch 1-4, vocab 256-16000, tied or untied embeddings;
* dtypes: float32 everywhere, or float16 compute with float32 parameters and norms (bfloat16, the
  mcore default, has no CPU kernels);
* eight recompute forms (none, full, full of the first layers, the MLP cell, the attention cell,
  MindFormers' default select patterns, the MLP with its SwiGlu `mul` excluded, both cells of the
  first layer);
* the six training-step forms of `step_forms.FORMS`.

Configs come in pairs with the same architecture, dtypes, recompute form and step form but different
shapes: the first of each pair is in the `build` half, the second in the `held-out` half.

`--set wide` draws off the grids instead (`wide_shape`): hidden, heads, head_dim, key/value heads (any
divisor), intermediate_size, seq, batch and vocab from ranges, `use_flash_attention` and `qkv_concat` on or
off, four dtype settings (float16 softmax, or float16 norms, under float16 compute too), full recompute of
every layer or the first k, select recompute of either or both cells of every layer or the first k.

    python benchmarks/sweep_mcore.py list [--set fresh...fresh6|wide...wide5]
    python benchmarks/sweep_mcore.py measure [--set fresh...fresh6|wide...wide5] [--only NAME ...] [--exact]
    python benchmarks/sweep_mcore.py compare [--set fresh...fresh6|wide...wide5] [--half build|held-out]

Peaks go to `benchmarks/data/sweep_mcore_peaks.json` (see `sweep.py` for the reading of a printed peak).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.step_forms import FORMS  # noqa: E402
from benchmarks.sweep import (_estimate, _load, _summary, measured_reference, record_peaks, structure,  # noqa: E402
                              wide_recompute)

BASE_CONFIG = REPO / "configs" / "qwen3_tiny.yaml"
DATA = REPO / "benchmarks" / "data" / "sweep_mcore_peaks.json"
SEED = 20261125
PAIRS = 16
# Held-out sets drawn after the estimator was compared with the sweep's held-out half: name -> (seed, name prefix,
# shift of the recompute and step forms)
# fresh3: drawn and measured after the first-attention and whole-layer moments (2026-11-26), before they saw it;
# fresh4: after the MLP backward's weight copies and the graph constants, before they saw it; fresh5: after the
# float32 optimizer's one-at-a-time updates that fresh4 found, before they saw it; fresh6: after the same
# updates for float16 compute that fresh5 found, before they saw it
FRESH_SETS = {"fresh": (20261127, "d", 3), "fresh2": (20261128, "e", 5), "fresh3": (20261129, "g", 7),
              "fresh4": (20261130, "j", 1), "fresh5": (20261201, "n", 6), "fresh6": (20261202, "p", 2)}
# Sets drawn by `wide`: every key that changes what training keeps, integers drawn from ranges off the grids below.
# name -> (seed, config name prefix, configs)
# wide2: drawn and measured to the byte while the estimator's last change (3397990) was made, first compared after it;
# wide3: drawn (at 9f2e6eb) and measured to the byte while the estimator's last change was made, first compared after it;
# a fitted set since: its h06 and h08 misses changed two terms (docs/estimator.md)
# wide4: drawn (at 01238e9) and measured to the byte while the estimator's last change was made, first compared after it
# wide5: drawn (at 205752e) and measured to the byte while the estimator's last change was made, first compared after it
WIDE_SETS = {"wide": (20261203, "w", 12), "wide2": (20261212, "c", 11), "wide3": (20261216, "h", 11),
             "wide4": (20261220, "k", 11), "wide5": (20261224, "q", 11)}
ARCHITECTURES = {"qwen3": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "qk_layernorm": True},
                 "telechat3": {"model_type": "telechat3", "architectures": ["TeleChat3ForCausalLM"],
                               "qk_layernorm": False}}
DTYPE_KEYS = ("params_dtype", "compute_dtype", "layernorm_compute_dtype", "softmax_compute_dtype", "rotary_dtype")
DTYPES = {"float32": dict.fromkeys(DTYPE_KEYS, "float32"),
          "fp16 compute, fp32 params": {**dict.fromkeys(DTYPE_KEYS, "float32"), "compute_dtype": "float16"}}
# the wide sets also draw float16 softmax or norms under float16 compute (parameters stay float32: bfloat16 and
# float16 parameters are not what an mcore user trains; a float16 rotary_dtype GPTModel.__init__ refuses)
WIDE_DTYPES = {**DTYPES,
               "fp16 compute and softmax": {**DTYPES["fp16 compute, fp32 params"], "softmax_compute_dtype": "float16"},
               "fp16 compute and norms": {**DTYPES["fp16 compute, fp32 params"], "layernorm_compute_dtype": "float16"}}
OFF = {"recompute": False, "select_recompute": False, "select_comm_recompute": False}
RECOMPUTE: dict[str, dict[str, Any]] = {
    "none": dict(OFF),
    "full": {**OFF, "recompute": True},
    "full, first 2 layers": {**OFF, "recompute": [2]},
    "select mlp": {**OFF, "select_recompute": {"mlp": True}},
    "select self_attention": {**OFF, "select_recompute": {"self_attention": True}},
    "select default patterns": {**OFF, "select_recompute": True},
    "select mlp, exclude its mul": {**OFF, "select_recompute": {"mlp": True},
                                    "select_recompute_exclude": {r"mlp\.activation_func\.mul": True}},
    "select mlp+self_attention, first layer": {**OFF, "select_recompute": {"mlp": [1], "self_attention": [1]}},
}
HIDDEN = (64, 128, 192, 256, 384, 512, 768)
SEQ = (32, 64, 128, 256, 512)
VOCAB = (256, 1000, 4096, 8000, 16000)
MAX_TRAIN_GFLOP = 40.0
MAX_FP32_PEAK = 1.5 * 2**30
WIDE_GFLOP, WIDE_PEAK = 10.0, 0.5 * 2**30   # a wide config measures (--exact) in about a minute here


@dataclass(frozen=True)
class McoreConfig:
    name: str
    half: str                        # "build" or "held-out"
    architecture: str
    dtype: str
    recompute: str
    step: str
    model: dict[str, Any] = field(default_factory=dict)
    recompute_config: dict[str, Any] | None = None         # written instead of the named form (the wide sets)
    base: ClassVar[Path] = BASE_CONFIG                     # the shipped YAML the configs are made from
    recompute_forms: ClassVar[dict[str, dict[str, Any]]] = RECOMPUTE

    def architecture_keys(self) -> dict[str, Any]:
        return ARCHITECTURES[self.architecture]

    def document(self) -> dict[str, Any]:
        """The training YAML: the shipped tiny model with this architecture, shape, dtypes and sections."""
        document = yaml.safe_load(self.base.read_text())
        model = document["model"]["model_config"]
        model.update(self.architecture_keys())
        model.update({key: value for key, value in self.model.items() if key != "batch_size"})
        model["max_position_embeddings"] = self.model["seq_length"]
        model.update(WIDE_DTYPES[self.dtype])
        batch = self.model["batch_size"]
        document["runner_config"]["batch_size"] = batch
        document["train_dataset"]["batch_size"] = batch
        document["recompute_config"] = dict(self.recompute_config or self.recompute_forms[self.recompute])
        if FORMS[self.step] is None:
            document.pop("runner_wrapper", None)
        else:
            document["runner_wrapper"] = FORMS[self.step]
        return document

    def write(self, path: Path) -> Path:
        path.write_text(yaml.safe_dump(self.document(), sort_keys=False))
        return path


def generate(which: str = "sweep") -> list[McoreConfig]:
    """The 32 configs: 16 pairs, each a build config and a held-out config of the same kind; or a later held-out
    set of 16 (`FRESH_SETS`)."""
    if which in FRESH_SETS:
        return _fresh(which)
    if which in WIDE_SETS:
        return _wide(which)
    rng = random.Random(SEED)
    architectures, dtypes, forms, steps = list(ARCHITECTURES), list(DTYPES), list(RECOMPUTE), list(FORMS)
    configs = []
    for pair in range(PAIRS):
        turn = pair // len(forms)    # the second turn of the forms pairs each with the other architecture and dtypes
        kind = {"architecture": architectures[(pair + turn) % 2], "dtype": dtypes[(pair // 2 + turn) % 2],
                "recompute": forms[pair % len(forms)], "step": steps[(pair + turn) % len(steps)]}
        for half in ("build", "held-out"):
            configs.append(McoreConfig(name=f"c{len(configs):02d}", half=half, model=_shape(rng), **kind))
    return configs


def _fresh(which: str) -> list[McoreConfig]:
    """16 held-out configs from the set's own seed; the kinds are paired as in the sweep, shifted by `shift`
    recompute forms, so each architecture and dtype setting meets other recompute and step forms."""
    seed, prefix, shift = FRESH_SETS[which]
    rng = random.Random(seed)
    architectures, dtypes, forms, steps = list(ARCHITECTURES), list(DTYPES), list(RECOMPUTE), list(FORMS)
    return [McoreConfig(name=f"{prefix}{index:02d}", half=which, architecture=architectures[(index // 2) % 2],
                        dtype=dtypes[index % 2], recompute=forms[(index + shift) % len(forms)],
                        step=steps[(index + shift) % len(steps)], model=_shape(rng))
            for index in range(PAIRS)]


def _wide(which: str) -> list[McoreConfig]:
    """A held-out set that samples every key a user writes (`wide_shape`); each config draws its architecture, dtype
    setting, recompute section (`sweep.wide_recompute`) and step form."""
    seed, prefix, count = WIDE_SETS[which]
    rng = random.Random(seed)
    configs = []
    for index in range(count):
        model = wide_shape(rng, _affordable)
        recompute, section = wide_recompute(rng, model["num_hidden_layers"], ("mlp", "self_attention"),
                                            r"mlp\.activation_func\.mul")
        configs.append(McoreConfig(name=f"{prefix}{index:02d}", half=which,
                                   architecture=rng.choice(list(ARCHITECTURES)), dtype=rng.choice(list(WIDE_DTYPES)),
                                   recompute=recompute, recompute_config=section, step=rng.choice(list(FORMS)),
                                   model=model))
    return configs


def wide_shape(rng: random.Random, affordable: Callable[..., bool], extra: Callable[[random.Random, int], dict]
               = lambda rng, hidden: {}) -> dict[str, Any]:
    """An mcore model drawn off the grids: layers 2-5, heads 1-12, hidden 48-640 (an even multiple of the heads:
    the attention's __init__ requires a multiple), an even head_dim 8-96 drawn apart from hidden, any key/value head
    count dividing the heads, intermediate_size 0.5-4 x hidden, seq 24-512, batch 1-4, vocab 100-16000, tied or
    untied embeddings, `use_flash_attention` and `qkv_concat` on or off; `extra` adds the family's own keys (the
    MoE's experts). Drawn until `affordable(model, WIDE_GFLOP, WIDE_PEAK)`."""
    while True:
        heads = rng.randint(1, 12)
        hidden, head_dim = 2 * heads * rng.randint(-(-24 // heads), 320 // heads), 2 * rng.randint(4, 48)
        model = {"num_hidden_layers": rng.randint(2, 5), "hidden_size": hidden, "num_attention_heads": heads,
                 "num_key_value_heads": rng.choice([k for k in range(1, heads + 1) if heads % k == 0]),
                 "head_dim": head_dim, "intermediate_size": rng.randint(hidden // 2, 4 * hidden),
                 "seq_length": rng.randint(24, 512), "batch_size": rng.randint(1, 4),
                 "vocab_size": rng.randint(100, 16000), "untie_embeddings_and_output_weights": rng.random() < 0.6,
                 "use_flash_attention": rng.random() < 0.5, "qkv_concat": rng.random() < 0.5}
        model["tie_word_embeddings"] = not model["untie_embeddings_and_output_weights"]
        if not model["use_flash_attention"]:
            # without flash attention MindFormers 1.9's mcore attention repeats the key/value heads with a reshape
            # that does not build on CPU (BatchMatMul: scores of (3, 9, 225, 26) against keys of (27, 9, 225, 26))
            model["num_key_value_heads"] = heads
        model.update(extra(rng, hidden))
        if affordable(model, WIDE_GFLOP, WIDE_PEAK):
            return model


def data_file(which: str) -> Path:
    return DATA if which == "sweep" else REPO / "benchmarks" / "data" / f"sweep_mcore_{which}_peaks.json"


def _shape(rng: random.Random) -> dict[str, Any]:
    while True:
        hidden = rng.choice(HIDDEN)
        head_dim = rng.choice([d for d in (16, 32, 64, 128) if d <= hidden // 2])
        heads = max(1, rng.choice((hidden // head_dim, hidden // head_dim // 2, 2 * hidden // head_dim)))
        kv_heads = rng.choice([k for k in (heads, heads // 2, heads // 4, 1) if k >= 1 and heads % k == 0])
        model = {"num_hidden_layers": rng.randint(2, 6), "hidden_size": hidden, "num_attention_heads": heads,
                 "num_key_value_heads": kv_heads, "head_dim": head_dim,
                 "intermediate_size": rng.choice((2, 3, 4)) * hidden + rng.choice((0, 8, 40)),
                 "seq_length": rng.choice(SEQ), "batch_size": rng.randint(1, 4), "vocab_size": rng.choice(VOCAB),
                 "untie_embeddings_and_output_weights": rng.random() < 0.75}
        model["tie_word_embeddings"] = not model["untie_embeddings_and_output_weights"]
        if _affordable(model):
            return model


def _affordable(model: dict[str, Any], max_gflop: float = MAX_TRAIN_GFLOP, max_peak: float = MAX_FP32_PEAK) -> bool:
    h, s, b, v, layers, f = (model[key] for key in ("hidden_size", "seq_length", "batch_size", "vocab_size",
                                                    "num_hidden_layers", "intermediate_size"))
    q = model["num_attention_heads"] * model["head_dim"]
    kv = model["num_key_value_heads"] * model["head_dim"]
    per_layer = 2 * b * s * (h * (q + 2 * kv) + q * h + 3 * h * f) + 4 * b * s * s * q
    gflop = 3 * (layers * per_layer + 2 * b * s * h * v) / 1e9
    activations = 4 * layers * b * (model["num_attention_heads"] * s * s + 5 * s * f + 8 * s * (h + q)) \
        + 16 * b * s * v
    params = 4 * (layers * (h * (q + 2 * kv) + q * h + 3 * h * f) + 2 * v * h)
    return gflop <= max_gflop and activations + 3 * params <= max_peak and s * b <= 2048


def _columns(config: McoreConfig) -> list[str]:
    m = config.model
    return [config.name, config.half, config.architecture + structure(m), str(m["num_hidden_layers"]),
            str(m["hidden_size"]),
            f"{m['num_attention_heads']}x{m['head_dim']}/{m['num_key_value_heads']}", str(m["seq_length"]),
            str(m["batch_size"]), str(m["vocab_size"]), str(m["intermediate_size"]), config.dtype,
            f"{config.recompute}; {config.step}"]


def estimate_rows(configs: list[McoreConfig], data: dict, halves: list[str],
                  columns: Callable[[McoreConfig], list[str]]) -> tuple[list[list[str]], dict[str, list[float]]]:
    """One table row per config of `halves` (its `columns`, then measured, estimated, error and the estimate's peak
    moment), and the absolute errors per half, against the recorded peaks in `data`."""
    import tempfile

    measured = {entry["name"]: entry for entry in data.get("configs", [])}
    rows, errors = [], {half: [] for half in halves}
    with tempfile.TemporaryDirectory(prefix="mf_memopt_sweep_") as tmp:
        for config in configs:
            if config.half not in halves:
                continue
            entry, shape = measured.get(config.name), columns(config)
            if entry is None or "measured_mib" not in entry:
                rows.append(shape + ["-", "-", entry.get("error", "not measured")[:60] if entry else "not measured",
                                     ""])
                continue
            estimated, term = _estimate(config.write(Path(tmp) / f"{config.name}.yaml"))
            reference = measured_reference(entry)
            error = (estimated - reference) / reference
            errors[config.half].append(abs(error))
            rows.append(shape + [f"{reference:.2f}", f"{estimated:.2f}", f"{error:+.1%}", term])
    return rows, errors


def print_comparison(title: str, headers: tuple[str, ...], configs: list[McoreConfig], path: Path,
                     halves: list[str], columns: Callable[[McoreConfig], list[str]]) -> dict[str, list[float]]:
    """Print the table of `estimate_rows` under `title` (the data file, MindSpore and launcher added) and each
    half's summary; the absolute errors per half. `headers` name the `columns`; the last four are added."""
    from benchmarks.common import print_table

    data = _load(path)
    rows, errors = estimate_rows(configs, data, halves, columns)
    print_table(f"{title}: estimate --runtime cpu against the measured memory-pool peak (MiB, to the byte); data "
                f"{path.relative_to(REPO)} (MindSpore {data.get('mindspore')}, launcher {data.get('launcher')})",
                (*headers, "measured", "estimated", "error", "estimated peak at"), rows)
    for half, values in errors.items():
        if values:
            print(_summary(half, values))
    return errors


def sweep_cli(argv: list[str] | None, description: str, configs: Callable[[], list[McoreConfig]], path: Path,
              script: str, compare: Callable[[list[str]], float], halves: bool) -> int:
    """`list`, `measure [--only ...] [--exact]` and `compare [--half ...]` (`halves`) of one set of configs."""
    parser = argparse.ArgumentParser(description=description)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="print the generated configs")
    run = commands.add_parser("measure", help="train every config one step and record its pool peak")
    run.add_argument("--only", nargs="*", help="config names to measure")
    run.add_argument("--exact", action="store_true", help="also replay the allocation log for the peak to the byte")
    against = commands.add_parser("compare", help="the estimator against the recorded peaks")
    if halves:
        against.add_argument("--half", nargs="+", choices=("build", "held-out"), default=["build", "held-out"])
    args = parser.parse_args(argv)
    if args.command == "list":
        for config in configs():
            print(config.name, config.half, config.dtype, "|", config.recompute, "|", config.step, "|", config.model)
    elif args.command == "compare":
        compare(getattr(args, "half", ["held-out"]))
    else:
        record_peaks(configs(), path, only=args.only, exact=args.exact,
                     command=f"python benchmarks/{script} measure --exact")
    return 0


def compare(halves: list[str], which: str = "sweep") -> float:
    """Print `estimate --runtime cpu` against the recorded peaks of `halves`; return the worst held-out error."""
    halves = [which] if which != "sweep" else halves
    errors = print_comparison("(e2) mcore sweep", ("config", "half", "model", "layers", "h", "heads x d/kv", "s", "b",
                                                   "v", "f", "dtypes", "recompute; step"),
                              generate(which), data_file(which), halves, _columns)
    return max(errors.get("held-out" if which == "sweep" else which, []), default=float("nan"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="print the generated configs")
    run = commands.add_parser("measure", help="train every config one step and record its pool peak")
    run.add_argument("--only", nargs="*", help="config names (c00, c01, ...) to measure")
    run.add_argument("--exact", action="store_true", help="also replay the allocation log for the peak to the byte")
    against = commands.add_parser("compare", help="the estimator against the recorded peaks")
    against.add_argument("--half", nargs="+", choices=("build", "held-out"), default=["build", "held-out"])
    for command in (run, against, listing):
        command.add_argument("--set", dest="which", choices=("sweep", *FRESH_SETS, *WIDE_SETS), default="sweep",
                             help="the 32-config sweep (default), a later held-out set of 16 or a wide set")
    args = parser.parse_args(argv)
    if args.command == "list":
        for config in generate(args.which):
            print(config.name, config.half, config.architecture, config.dtype, "|", config.recompute, "|",
                  config.step, "|", config.model)
    elif args.command == "compare":
        compare(args.half, args.which)
    else:
        suffix = "" if args.which == "sweep" else f" --set {args.which}"
        record_peaks(generate(args.which), data_file(args.which), only=args.only, exact=args.exact,
                     command=f"python benchmarks/sweep_mcore.py measure --exact{suffix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
