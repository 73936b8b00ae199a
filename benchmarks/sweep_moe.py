"""(e3) Generated Qwen3-MoE configs and their measured memory-pool peaks, a held-out half included.

The CPU estimate of MoE layers (mf_memopt's dense experts stand-in on CPU) was written from the
allocation logs of the build half; the held-out half was drawn and measured with it, before the
estimate was compared with either. The sweep varies what changes what an MoE layer keeps:

* layers 2-4, hidden 64-512, heads and head_dim drawn apart, key/value heads dividing the heads,
  seq 32-256, batch 1-4, vocab 256-8000, tied or untied embeddings;
* routed experts 2-8, top-k 1-4 (at most the experts), one expert's intermediate size 0.25-1.5 x
  hidden, normalised or raw top-k probabilities, the gbs or seq aux loss;
* dtypes: float32 everywhere, or float16 compute with float32 parameters and norms;
* seven recompute forms (none, full, full of the first layer, the MLP cell, the attention cell, the
  experts alone, the router alone);
* the training-step forms of `step_forms.FORMS`.

Configs come in pairs of the same kind with different shapes: the first of each pair is in the
`build` half, the second in the `held-out` half.

    python benchmarks/sweep_moe.py list
    python benchmarks/sweep_moe.py measure [--only NAME ...] [--exact]
    python benchmarks/sweep_moe.py compare [--half build|held-out]

Peaks go to `benchmarks/data/sweep_moe_peaks.json`.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.step_forms import FORMS  # noqa: E402
from benchmarks.sweep_mcore import DTYPES, OFF, McoreConfig, print_comparison, sweep_cli  # noqa: E402

BASE_CONFIG = REPO / "configs" / "qwen3_moe_tiny.yaml"
DATA = REPO / "benchmarks" / "data" / "sweep_moe_peaks.json"
SEED = 20261126
PAIRS = 8
RECOMPUTE: dict[str, dict[str, Any]] = {
    "none": dict(OFF),
    "full": {**OFF, "recompute": True},
    "full, first layer": {**OFF, "recompute": [1]},
    "select mlp": {**OFF, "select_recompute": {"mlp": True}},
    "select self_attention": {**OFF, "select_recompute": {"self_attention": True}},
    "select mlp.experts": {**OFF, "select_recompute": {r"mlp\.experts": True}},
    "select mlp.router": {**OFF, "select_recompute": {r"mlp\.router": True}},
}
HIDDEN = (64, 128, 192, 256, 384, 512)
SEQ = (32, 64, 128, 256)
VOCAB = (256, 1000, 4096, 8000)
MAX_TRAIN_GFLOP = 30.0
MAX_FP32_PEAK = 1.0 * 2**30


@dataclass(frozen=True)
class MoeConfig(McoreConfig):
    """A sweep config made from the shipped tiny Qwen3-MoE."""

    base: ClassVar[Path] = BASE_CONFIG
    recompute_forms: ClassVar[dict[str, dict[str, Any]]] = RECOMPUTE

    def architecture_keys(self) -> dict[str, Any]:
        return {"moe_router_pre_softmax": True}   # as the wheel's Qwen3-MoE YAML; MindFormers needs it at top-1


def generate() -> list[MoeConfig]:
    """The 16 configs: 8 pairs, each a build config and a held-out config of the same kind."""
    rng = random.Random(SEED)
    dtypes, forms, steps = list(DTYPES), list(RECOMPUTE), list(FORMS)
    configs = []
    for pair in range(PAIRS):
        kind = {"dtype": dtypes[(pair // 4) % 2], "recompute": forms[pair % len(forms)],
                "step": steps[pair % len(steps)]}
        for half in ("build", "held-out"):
            configs.append(MoeConfig(name=f"m{len(configs):02d}", half=half, architecture="qwen3_moe",
                                     model=_shape(rng), **kind))
    return configs


def _shape(rng: random.Random) -> dict[str, Any]:
    while True:
        hidden = rng.choice(HIDDEN)
        head_dim = rng.choice([d for d in (16, 32, 64) if d <= hidden // 2])
        heads = max(1, rng.choice((hidden // head_dim, hidden // head_dim // 2)))
        kv_heads = rng.choice([k for k in (heads, heads // 2, 1) if k >= 1 and heads % k == 0])
        experts = rng.choice((2, 4, 6, 8))
        model = {"num_hidden_layers": rng.randint(2, 4), "hidden_size": hidden, "num_attention_heads": heads,
                 "num_key_value_heads": kv_heads, "head_dim": head_dim, "num_experts": experts,
                 "num_experts_per_tok": rng.randint(1, min(4, experts)),
                 "moe_intermediate_size": max(16, int(hidden * rng.choice((0.25, 0.5, 1.0, 1.5)))),
                 "norm_topk_prob": rng.random() < 0.5,
                 "moe_router_load_balancing_type": rng.choice(("gbs_aux_loss", "seq_aux_loss")),
                 "seq_length": rng.choice(SEQ), "batch_size": rng.randint(1, 4), "vocab_size": rng.choice(VOCAB),
                 "untie_embeddings_and_output_weights": rng.random() < 0.75}
        model["tie_word_embeddings"] = not model["untie_embeddings_and_output_weights"]
        if _affordable(model):
            return model


def _affordable(model: dict[str, Any]) -> bool:
    h, s, b, v, layers = (model[key] for key in ("hidden_size", "seq_length", "batch_size", "vocab_size",
                                                 "num_hidden_layers"))
    e, f = model["num_experts"], model["moe_intermediate_size"]
    q = model["num_attention_heads"] * model["head_dim"]
    kv = model["num_key_value_heads"] * model["head_dim"]
    per_layer = 2 * b * s * (h * (q + 2 * kv) + q * h + 3 * h * f * e) + 4 * b * s * s * q
    gflop = 3 * (layers * per_layer + 2 * b * s * h * v) / 1e9
    activations = 4 * layers * b * (model["num_attention_heads"] * s * s + 5 * s * f * e + 10 * s * (h + q)) \
        + 16 * b * s * v
    params = 4 * (layers * (h * (q + 2 * kv) + q * h + 3 * h * f * e) + 2 * v * h)
    return gflop <= MAX_TRAIN_GFLOP and activations + 3 * params <= MAX_FP32_PEAK and s * b <= 1024


def _columns(config: MoeConfig) -> list[str]:
    m = config.model
    return [config.name, config.half, str(m["num_hidden_layers"]), str(m["hidden_size"]),
            f"{m['num_attention_heads']}x{m['head_dim']}/{m['num_key_value_heads']}",
            f"{m['num_experts']}/{m['num_experts_per_tok']}x{m['moe_intermediate_size']}",
            str(m["seq_length"]), str(m["batch_size"]), str(m["vocab_size"]), config.dtype,
            f"{config.recompute}; {config.step}"]


def compare(halves: list[str]) -> float:
    """Print `estimate --runtime cpu` against the recorded peaks of `halves`; return the worst held-out error."""
    errors = print_comparison("(e3) Qwen3-MoE sweep", ("config", "half", "layers", "h", "heads x d/kv",
                                                       "experts/top-k x F", "s", "b", "v", "dtypes", "recompute; step"),
                              generate(), DATA, halves, _columns)
    return max(errors.get("held-out", []), default=float("nan"))


def main(argv: list[str] | None = None) -> int:
    return sweep_cli(argv, __doc__.splitlines()[0], generate, DATA, "sweep_moe.py", compare, halves=True)


if __name__ == "__main__":
    sys.exit(main())
