"""What a decoder layer keeps for its backward pass, per operator: the types every family's inventory uses.

Each tensor is named with the layer-relative path of the operator that produces it, the
same paths the plan's patterns match, so a recompute or swap rule can be mapped onto bytes;
its `role` is a stable id of what the tensor is (the input of the MLP's down projection ...),
which compression and the planner match on, whatever the display text says.
"""

from __future__ import annotations

from dataclasses import dataclass

from .spec import ModelSpec, ParallelSpec

FP32 = 4

# Roles of saved tensors that other parts of the estimator and the planner look for.
MLP_INPUT = "mlp input"                 # the normalised input of the MLP's gate and up projections
MLP_DOWN_INPUT = "mlp down input"       # the gated product, the input of the MLP's down projection
ATTENTION_INPUT = "attention input"     # the normalised input of the attention's query/key/value projection
ATTENTION_OUTPUT = "attention output"   # the attention's output, the input of its output projection
MLP_GATE = "mlp gate"                   # the gate projection's activation output, a factor of the gated product
MLP_GATE_EARLY = "mlp gate early"       # the activation backward's sigmoid, computed in the forward pass (CPU)
ROLES = (MLP_INPUT, MLP_DOWN_INPUT, ATTENTION_INPUT, ATTENTION_OUTPUT, MLP_GATE, MLP_GATE_EARLY)


@dataclass(frozen=True, slots=True, kw_only=True)
class Saved:
    path: str                   # cell path + primitive that produces it, relative to the layer
    what: str
    nbytes: int                 # per micro-batch, per device
    cpu_only: bool = False
    kept_by_full_recompute: bool = False  # the layer's output is never recomputed
    recompute_input: bool = False  # exists only as the input a full recompute of the layer starts from
    rebuilt_nbytes: int | None = None  # size when a recompute rebuilds it, if different (see _cpu_layer)
    read_by: str | None = None  # the matmul whose backward reads it; when that matmul is recomputed: rebuilt_nbytes
    output_of: str | None = None  # the cell whose output it is: a select rule naming that cell keeps it
    role: str | None = None     # a stable id of what it is (`ROLES`), for rules that must not parse `what`
    copies: int = 1             # copies of one tensor in `nbytes` (a float32 copy per reader on CPU)
    never_recomputed: bool = False  # kept whatever the recompute: a cell with its own backward holds it
    spent_early: bool = False   # gone by the peak of its layer's backward (the first backward ops replace it)


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    """A compute-heavy operator of the forward pass and its FLOPs (per micro-batch, per device)."""

    path: str
    flops: int


@dataclass(frozen=True, slots=True)
class Dims:
    """Element counts of the usual activation shapes on one device."""

    bsh: int        # b*s*h, split by sequence parallelism (and context parallelism)
    bsh_full: int   # b*s*h, not split by sequence parallelism
    bsf: int        # b*s*f/t
    q: int          # b*(n/t)*s*d
    kv: int         # b*(n_kv/t)*s*d
    scores: int     # b*(n/t)*s*s
    bs: int         # b*s (per-token statistics)


def dims(model: ModelSpec, parallel: ParallelSpec) -> Dims:
    t, s = parallel.tensor, model.seq // parallel.context
    b, h, d = model.batch, model.hidden, model.head_dim
    bsh_full = b * s * h
    return Dims(bsh=bsh_full // (t if parallel.sequence_parallel else 1), bsh_full=bsh_full,
                bsf=b * s * model.ffn // t, q=b * (model.heads // t) * s * d,
                kv=b * max(model.kv_heads // t, 1) * s * d, scores=b * (model.heads // t) * s * model.seq,
                bs=b * s)


