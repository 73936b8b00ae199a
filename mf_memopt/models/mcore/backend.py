"""An mcore model on a backend: what CPU cannot run, and the model built with MindFormers' handling off.

On CPU (MindSpore 2.9, MindFormers 1.9, measured here) the models build but four kernels are
missing: `RmsNorm`, `Outer`, `FlashAttentionScore` and the embedding's `EmbeddingDenseBackward`.
No YAML key avoids them (the layer spec hard-wires the fused norm and the flash-attention cell), so
`after_build` replaces each by a stand-in under the same name (`cpu_kernels.py`). bfloat16 has no CPU
kernels, and it is TransformerConfig's default `compute_dtype`.

MindFormers sets recompute and offload marks for an mcore model in one place, `LayerSetting`
(built by `TransformerBlock`), from the top-level `recompute_config` and from `swap`, `layer_swap` and
`op_swap` in `model_config`; both are turned off before the build. Its cells also mark a few
operators themselves (`Reshape` in the fused linears and the MLP); those marks stay, and the log
says which.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...document.errors import ConfigIssue
from ...document.source import Source, issue_at
from .keys import ARCHITECTURES, DTYPE_DEFAULTS, MODEL, SWAP_KEYS

PLAN_MARKS = ("recompute", "recompute_comm_op", "offload", "backward_prefetch")   # what a memory plan sets
RECOMPUTE_OFF = {"recompute": False, "select_recompute": False, "select_comm_recompute": False,
                 "select_recompute_exclude": False, "select_comm_recompute_exclude": False,
                 "parallel_optimizer_comm_recompute": False, "mp_comm_recompute": False,
                 "recompute_slice_activation": False}
_REFUSED_ON_CPU = {
    "use_eod_attn_mask_compression": (True, "the TND attention layout has no CPU stand-in"),
    "use_ring_attention": (True, "ring attention has no CPU stand-in"),
    "use_alibi_mask": (True, "ALiBi has no CPU stand-in for FlashAttentionScore"),
}


def backend_issues(model_config: Mapping[str, Any] | None, device_target: str,
                   source: Source | None) -> list[ConfigIssue]:
    if not isinstance(model_config, Mapping):
        return []
    issues = []
    named = model_config.get("architectures")
    named = named[0] if isinstance(named, list) and named else named
    arch = ARCHITECTURES.get(named) if isinstance(named, str) else None
    if arch is not None and not arch.trains:
        issues.append(issue_at(source, (*MODEL, "architectures"), f"MindFormers 1.9 does not train {arch.name} "
                               "(NotImplementedError in train mode)", "train Qwen3 or TeleChat3 (mcore), or a legacy "
                               "model"))
    if arch is not None and arch.moe and device_target not in ("Ascend", "CPU"):
        issues.append(issue_at(source, (*MODEL, "architectures"), f"{arch.name}'s MoE layers need TopkExt, "
                               f"GroupedMatmul and other kernels {device_target} does not have (mf_memopt has CPU "
                               "stand-ins for them)", "train MoE models on Ascend, or on CPU"))
    if device_target != "CPU":
        return issues
    for key, default in DTYPE_DEFAULTS.items():
        value = str(model_config.get(key) or default)
        if value.lower() == "bfloat16":
            written = "" if model_config.get(key) else " (TransformerConfig's default: the key is not written)"
            issues.append(issue_at(source, (*MODEL, key), f"bfloat16{written} has no CPU kernels in MindSpore",
                                   "use float32 (or float16) on CPU; bfloat16 runs on Ascend"))
    for key, (refused, why) in _REFUSED_ON_CPU.items():
        if model_config.get(key) == refused:
            issues.append(issue_at(source, (*MODEL, key), why, f"set {key}: {not refused} on CPU"))
    if float(model_config.get("attention_dropout") or 0) > 0:
        issues.append(issue_at(source, (*MODEL, "attention_dropout"), "attention dropout has no CPU stand-in for "
                               "FlashAttentionScore", "set attention_dropout: 0.0 on CPU"))
    return issues


def prepare_build(config: Any, device_target: str, log: Callable[[str], None]) -> None:
    """MindFormers' LayerSetting reads recompute from the top-level section and swap from model_config: both
    say "nothing" for the build; mf_memopt applies the plan to the built model."""
    config["recompute_config"] = dict(RECOMPUTE_OFF)
    config["swap_config"] = {"swap": False}
    model_config = config.model.model_config
    for key in SWAP_KEYS:
        if key in model_config:
            del model_config[key]
    model_config.swap = False
    if device_target == "CPU":
        model_config.disable_lazy_inline = True     # lazy_inline graphs do not run on the CPU backend


def after_build(network: Any, config: Any, device_target: str, log: Callable[[str], None]) -> list[str]:
    marked = own_marks(network)
    if marked:
        log("MindFormers' mcore cells mark these operators for recompute themselves, in every layer; mf_memopt "
            f"leaves them: {', '.join(marked)}")
    if device_target != "CPU":
        return []
    from .cpu_kernels import replace_cpu_kernels
    from .moe_kernels import deferrable_routers

    replaced = replace_cpu_kernels(network)
    deferrable_routers(network)         # the CPU step takes over their Parameter additions (moe_kernels.py)
    pure = pure_morphs(network)
    if pure:
        log(f"{len(pure)} Morph operators (MindFormers' linears, logits and label reshapes) marked free of side "
            "effects, so that recompute frees the forward's tensors")
    counts: dict[tuple[str, str], int] = {}
    for _, primitive, stand_in in replaced:
        counts[(primitive, stand_in)] = counts.get((primitive, stand_in), 0) + 1
    log(f"{device_target} has no kernel for {', '.join(dict.fromkeys(primitive for primitive, _ in counts))}: "
        "replaced by "
        f"stand-ins under the same names ({', '.join(f'{n} {stand_in}' for (_, stand_in), n in counts.items())})")
    return [path for path, _, _ in replaced]


def unshare_primitives(layers: list[Any]) -> list[str]:
    """Give every decoder layer its own copy of an operator object MindFormers shares between layers; the layer-
    relative paths of the shared ones.

    MindFormers' TopKRouter takes its gating activation from a module-level table (`GATING_ACTIVATION`), so the
    routers of every MoE layer, of every model built in the process, hold one Softmax (or Sigmoid) object: a mark
    set on one layer's marks them all, and stays for the next model built (and MindFormers' own LayerSetting stops
    with "'bool' object is not callable" when a pattern names it in a second layer, the first mark having replaced
    the primitive's `recompute` method by its value). Every layer gets a copy without the marks a plan sets, the
    first layer included, so that nothing marked before this build, or by this model's plan, is shared."""
    import copy

    seen: dict[int, list[tuple[Any, str, str]]] = {}
    for layer in layers:
        for path, cell in layer.cells_and_names():
            for name, primitive in cell._primitives.items():
                if primitive is not None:
                    seen.setdefault(id(primitive), []).append((cell, name, f"{path}.{name}" if path else name))
    found: list[str] = []
    for owners in seen.values():
        if len(owners) < 2:
            continue
        for cell, name, relative in owners:
            own = copy.deepcopy(cell._primitives[name])
            for mark in PLAN_MARKS:
                if mark in own.attrs:
                    own.del_prim_attr(mark)
                vars(own).pop(mark, None)       # add_prim_attr also set it as an attribute (`recompute` shadowed)
            setattr(cell, name, own)
            if relative not in found:
                found.append(relative)
    return found


def own_marks(network: Any) -> list[str]:
    """The operators of the first decoder layer that MindFormers' cells marked for recompute, by path."""
    from ...apply.family import first_layer_list

    layers = first_layer_list(network) or []
    if not layers:
        return []
    marked = []
    for path, cell in layers[0].cells_and_names():
        for name, primitive in cell._primitives.items():
            if primitive is not None and primitive.attrs.get("recompute") is True:
                marked.append(f"{path}.{name}" if path else name)
    return marked


def pure_morphs(network: Any) -> list[str]:
    """Clear the memory and IO side-effect flags MindSpore's `Morph` sets on itself; the paths of the Morphs.

    MindFormers' mcore cells run their linears and their logits and label reshapes through `Morph`, whose
    functions are plain graph code, but MindSpore marks every Morph as writing memory and doing IO. The whole
    forward then threads the side-effect chain: each layer's weights are loaded after the previous layer's
    output, and the learning-rate schedule (control flow) waits for the loss. On CPU the step is then cut into
    a forward kernel graph and a backward one, and every forward tensor the backward graph names (the
    recompute copies' inputs, the readers of a weight the optimizer later assigns) stays alive until the
    forward graph ends: full recompute of qwen3_tiny peaked at 47.9 MiB in the forward of its last layer.
    The gradients are unchanged (the Morphs keep their bprop and `side_effect_backprop`)."""
    found = []
    for owner_path, owner in network.cells_and_names():
        for name, primitive in owner._primitives.items():
            if primitive is not None and type(primitive).__name__ == "Morph":
                primitive.add_prim_attr("side_effect_mem", False)
                primitive.add_prim_attr("side_effect_io", False)
                found.append(f"{owner_path}.{name}" if owner_path else name)
    return found
