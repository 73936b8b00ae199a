"""Where mf_memopt's marks differ from MindFormers' own `LayerSetting` on the same build, on purpose.

Each difference is a rule with a reason (docs/configuration.md, "Where the marks differ from MindFormers");
`validate` and `plan` print a note for each one a YAML meets, at the key it concerns. The differential tests
(tests/mindspore/test_differential_*.py; test_differential_twins.py on the tiny twins of the pipeline YAMLs
MindFormers ships) build the same model both ways and assert every mark equal except these.

MindFormers 1.9's `LayerSetting.set_recompute` (parallel_core/training_graph/transformer/utils.py, used by the
legacy and the mcore models alike) calls `Cell.recompute(recompute_slice_activation=...)` when `recompute` is
`True`, and `Cell.recompute()` with no option for per-stage counts and layer lists; it never passes
`mp_comm_recompute` or `parallel_optimizer_comm_recompute`.
"""

from __future__ import annotations

from ..document.errors import ConfigIssue
from ..document.source import KeyPath, Source
from .family_rules import rules_of
from .plan import Plan

OPTIONS = ("recompute_config",)
MP_COMM = (*OPTIONS, "mp_comm_recompute")
SLICE = (*OPTIONS, "recompute_slice_activation")
RECOMPUTE = (*OPTIONS, "recompute")

# rule id -> the reason, as the notes and the docs say it
REASONS = {
    "recompute-options-written": "the recompute_config documentation and MindSpore's Cell.recompute define the "
                                 "option for every fully recomputed layer",
    "no-default-slice-marks": "slice_activation: False is MindSpore's default; mf_memopt writes the option only "
                              "when the YAML does",
    "mcore-default-swap": "MindFormers' default `.*\\.flash_attention` names nothing in an mcore layer",
    "unshared-operators": "one layer's swap must not offload every layer's operator",
    "llama-attention-core": "the per-layer selection is what the YAML wrote; to keep MindFormers' behaviour, add "
                            "'attention\\.(batch_matmul_q_k|mul|add|cast_attn|softmax|batch_matmul|tile_kv|"
                            "apply_rotary_emb)' to select_recompute",
}
TP = ("parallel_config", "model_parallel")


def differences(source: Source, plan: Plan) -> list[ConfigIssue]:
    """One note per documented difference from MindFormers' marks that `plan` meets."""
    return [*_option_notes(source, plan), *rules_of(plan.family).model_notes(source, plan)]


def _option_notes(source: Source, plan: Plan) -> list[ConfigIssue]:
    """The options of Cell.recompute, which only fully recomputed layers take."""
    full = [layer.layer for layer in plan.layers if layer.full_recompute is not None]
    if not full:
        return []
    notes = []
    options = plan.rules.options
    if options.mp_comm_recompute is not None:
        notes.append(note(source, MP_COMM, "recompute-options-written",
                           _mp_comm(options.mp_comm_recompute, full, source.get(TP, 1))))
    recompute_true = source.get(RECOMPUTE) is True
    if options.recompute_slice_activation is not None and not recompute_true:
        notes.append(note(source, SLICE, "recompute-options-written",
                           "MindFormers passes it only when recompute is true; mf_memopt passes it to Cell.recompute "
                           f"of the {layers_text(full)} fully recomputed"))
    if recompute_true and options.recompute_slice_activation is None:
        notes.append(note(source, RECOMPUTE, "no-default-slice-marks",
                           "MindFormers marks every operator of a fully recomputed layer slice_activation: False; "
                           "mf_memopt leaves the mark off"))
    return notes


def _mp_comm(value: bool, full: list[int], tp: object) -> str:
    effect = ("communication is recomputed, as without the mark" if value else
              "the forward communication after an operator is not recomputed, its output kept (MindFormers "
              "recomputes it)")
    text = (f"MindFormers 1.9 ignores it; mf_memopt passes it to Cell.recompute of the {layers_text(full)} fully "
            f"recomputed, marking their operators recompute_comm_op: {value}: under tensor parallelism {effect}")
    return text + ("; model_parallel is 1, so there is no such communication" if tp == 1 else "")


def layers_text(layers: list[int]) -> str:
    return f"{len(layers)} layer{'s' if len(layers) != 1 else ''}"


def note(source: Source, path: KeyPath, rule: str, message: str) -> ConfigIssue:
    """The note for documented difference `rule` (`REASONS`), at the key `path`; the families' own notes too."""
    return source.issue(path, f"differs from MindFormers [{rule}]: {message}", REASONS[rule], severity="note")
