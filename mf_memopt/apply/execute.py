"""`apply_plan`: set the plan's recompute and offload attributes on a model's decoder layers.

Every pattern is resolved against the real cells first; if anything is wrong, one
`ConfigError` lists it all and no attribute has been set. Then the attributes are set,
one log line per layer and kind in MindFormers' grep-able form, and an `ApplyReport` lists
every cell and primitive that was touched.

The model comes prepared from the build (`runtime.build`: stand-ins installed, operators MindFormers shares
between layers copied per layer); apply only sets marks, and refuses a mark on an operator another layer holds.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..compress.family import compression_of
from ..config.actions import Action, LayerActions, Skip, layer_actions
from ..config.compress_actions import CompressAction, compress_actions
from ..config.match import NO_MATCH, merge_layers
from ..config.plan import Plan
from ..config.render import formative_lines
from ..document.errors import ConfigError, ConfigIssue, key_path
from . import cells
from .compress import codec_for, compress_line, install
from .family import backend_of
from .logs import LOGGER, layer_lines

CPU_OFFLOAD_NOTE = ("Offload attributes are recorded in the compiled graph, but only the Ascend backend moves "
                    "activations to host memory: on {device} nothing is swapped")


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplyReport:
    device_target: str | None
    actions: tuple[Action, ...]
    skipped: tuple[Skip, ...]
    log_lines: tuple[str, ...]
    compressed: tuple[CompressAction, ...] = ()
    preset: tuple[dict, ...] = ()   # marks the model's own cells set before the plan: {layer, path, set}

    def to_dict(self) -> dict:
        result = {"device_target": self.device_target, "set": [action.to_dict() for action in self.actions],
                  "not_offloaded": [skip.to_dict() for skip in self.skipped], "log": list(self.log_lines)}
        if self.preset:
            result["preset"] = list(self.preset)
        if self.compressed:
            result["compressed"] = [action.to_dict() for action in self.compressed]
        return result

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def apply_plan(plan: Plan, model_or_layers: Any, *, device_target: str | None = None) -> ApplyReport:
    """Apply `plan` to a MindFormers causal LM, or to its decoder layers given in order."""
    layers = find_layers(model_or_layers, plan)
    issues: list[ConfigIssue] = []
    family = plan.family
    followers = [] if isinstance(model_or_layers, Sequence) else backend_of(family).follower_layers(model_or_layers)
    per_layer = [layer_actions(layer_plan, layer, plan.rules.options, family, plan.file, issues)
                 for layer_plan, layer in zip(plan.layers, layers)]
    # the MTP layers take the last layer's plan; a pattern naming nothing there is not an issue (`_follow`)
    following = [layer_actions(plan.layers[-1], follower, plan.rules.options, family, plan.file, [])
                 for follower in followers]
    issues = _where_layers_differ(issues, per_layer + following)
    issues += _shared_marks(per_layer + following, layers + followers, plan.file)
    compression = compression_of(family) if any(layer_plan.op_compress for layer_plan in plan.layers) else None
    compressed = [compress_actions(layer_plan.op_compress, layer_plan.layer, layer, compression, plan.file, issues)
                  if layer_plan.op_compress else [] for layer_plan, layer in zip(plan.layers, layers)]
    if any(issue.severity == "error" for issue in issues):
        raise ConfigError(merge_layers([issue for issue in issues if issue.severity == "error"]))
    device = device_target or _current_device()
    lines = _log(formative_lines(plan))
    lines += _log([warning.render() for warning in plan.warnings], logging.WARNING)
    lines += _log([issue.render() for issue in merge_layers(issues) if issue not in plan.warnings], logging.WARNING)
    lines += _log([f"Resolved: {conflict.message()}" for conflict in plan.conflicts])
    preset = tuple(mark for index, layer in enumerate(layers) for mark in _preset(index, layer))
    preset += tuple({**mark, "path": f"mtp.layers.{index}.{mark['path']}"} for index, follower in enumerate(followers)
                    for mark in _preset(plan.layers[-1].layer, follower))
    recomputed = {actions.layer: {action.path for action in actions.recompute} for actions in per_layer}
    every_compressed = [action for actions in compressed for action in actions]
    codec = codec_for(every_compressed, device)
    notes = install(every_compressed, compression, recomputed, codec)
    lines += _log([codec.line()] if codec is not None else [])
    lines += _log([f"op_compress: {note}" for note in notes], logging.WARNING)
    for actions, compress in zip(per_layer, compressed):
        _execute(actions)
        lines += _log(layer_lines(actions) + [line for line in [compress_line(actions.layer, compress)] if line])
    followed: list[Action] = []
    for index, actions in enumerate(following):
        follower_lines, follower_actions = _follow(plan, index, actions)
        lines += _log(follower_lines)
        followed += follower_actions
    offloaded = any(actions.offload for actions in per_layer) or \
        any(action.use.offload is not None for actions in compressed for action in actions)
    if device != "Ascend" and offloaded:
        lines += _log([CPU_OFFLOAD_NOTE.format(device=device or "this backend")], logging.WARNING)
    return ApplyReport(device_target=device,
                       actions=tuple(action for actions in per_layer for action in [*actions.recompute,
                                                                                   *actions.offload]) + tuple(followed),
                       skipped=tuple(skip for actions in per_layer for skip in actions.skipped),
                       log_lines=tuple(lines), compressed=tuple(action for actions in compressed for action in actions),
                       preset=preset)


def _where_layers_differ(issues: list[ConfigIssue], per_layer: list[LayerActions]) -> list[ConfigIssue]:
    """A rule whose pattern names nothing in some layers but matches in others (a model whose layers differ:
    DeepSeek-V3's dense first layers have no router, and only its MTP layer has `eh_proj`) applies where it
    matches, as in MindFormers: its misses are warnings. A rule that matches in no layer stays an error."""
    matched = {(use.origin.key, use.origin.line) for actions in per_layer for pairs in actions.matched.values()
               for use, matches in pairs if matches}
    matched |= {(use.origin.key, use.origin.line) for actions in per_layer for use, _, _ in actions.op_swaps}
    return [replace(issue, severity="warning", message=f"{issue.message}; it applies in the layers where it matches")
            if issue.severity == "error" and NO_MATCH in issue.message and (issue.path, issue.line) in matched
            else issue for issue in issues]


def _shared_marks(per_layer: list[LayerActions], layers: list[Any], file: str) -> list[ConfigIssue]:
    """An error for each operator the plan marks that another layer holds too: the mark would reach that layer
    (MindFormers' MoE routers share one gating activation). The build gives each layer its own copy
    (`runtime.build.unshare_layers`); a model built elsewhere is refused before anything is set."""
    holders: dict[int, list[int]] = {}
    for index, layer in enumerate(layers):
        for _, primitive, _ in cells.walk_primitives(layer):
            owners = holders.setdefault(id(primitive), [])
            if index not in owners:
                owners.append(index)
    issues = []
    for position, actions in enumerate(per_layer):      # in the order of `layers`: the decoder's, then followers
        for action in [*actions.recompute, *actions.offload]:
            others = [index for index in holders.get(id(action.obj), []) if index != position]
            if action.target == "primitive" and others:
                issues.append(ConfigIssue(
                    file=action.origin.file or file, line=action.origin.line, path=action.origin.key,
                    message=f"{action.path} of layer {position} is one operator object with layer(s) "
                            f"{', '.join(map(str, others))}: a mark set for one layer would reach them all",
                    hint="build the model with mf_memopt.runtime.build.build_model, or call "
                         "mf_memopt.runtime.build.unshare_layers(network, plan.family, print) before apply_plan"))
    return issues


def _follow(plan: Plan, index: int, actions: LayerActions) -> tuple[list[str], list[Action]]:
    """Apply the last decoder layer's plan to a layer that follows it (an MTP layer), as MindFormers' LayerSetting
    does: its patterns match from that layer's own children, and a pattern that names nothing there does nothing
    (the decoder layers have been checked against it)."""
    last = plan.layers[-1]
    _execute(actions)
    lines = layer_lines(actions)
    prefix = f"MTP layer {index} (the last layer's plan, as MindFormers' LayerSetting): "
    lines = [prefix + line.replace(f" at layer {last.layer}", "") for line in lines] or \
        [prefix + f"nothing of layer {last.layer}'s plan names its cells"]
    where = f"mtp.layers.{index}"
    return lines, [replace(action, path=f"{where}.{action.path}" if action.path else where)
                   for action in [*actions.recompute, *actions.offload]]


def find_layers(model_or_layers: Any, plan: Plan) -> list[Any]:
    """The decoder layers, in order: the sequence given, or those the model's family finds in the model."""
    if isinstance(model_or_layers, Sequence):
        layers = list(model_or_layers)
    else:
        layers = backend_of(plan.family).decoder_layers(model_or_layers)
        if layers is None:
            raise ConfigError([ConfigIssue(
                file=plan.file, line=None, path="model",
                message=f"found no decoder layers in {cells.type_name(model_or_layers)}",
                hint="pass the decoder layers to apply_plan as a list")])
    if len(layers) != plan.num_layers:
        raise ConfigError([ConfigIssue(
            file=plan.file, line=None, path=key_path(plan.family.keys.num_layers),
            message=f"the model has {len(layers)} decoder layers but the plan has {plan.num_layers}",
            hint="plan and build the model from the same YAML")])
    return layers


_MARKS = ("recompute", "recompute_comm_op", "offload")


def _preset(index: int, layer: Any) -> list[dict]:
    """The marks a layer's primitives carry before the plan is applied: with MindFormers' handling off, the ones
    its cells set themselves (an mcore Reshape's recompute). `verify` expects them in the graph too."""
    found = []
    for path, primitive, _ in cells.walk_primitives(layer):
        attrs = getattr(primitive, "attrs", {})
        for mark in _MARKS:
            if mark in attrs:
                found.append({"layer": index, "path": path, "set": {mark: attrs[mark]}})
    return found


def _execute(actions: LayerActions) -> None:
    for action in actions.recompute:
        if action.setting == "recompute_cell":
            cells.recompute_cell(action.obj, **action.value)
        elif action.setting == "recompute":
            cells.recompute_primitive(action.obj, action.value)
        else:
            cells.set_comm_recompute(action.obj, action.value)
    for action in actions.offload:
        cells.offload_primitive(action.obj, action.value)


def _log(lines: list[str], level: int = logging.INFO) -> list[str]:
    for line in lines:
        LOGGER.log(level, line)
    return lines


def _current_device() -> str | None:
    try:
        import mindspore
    except ImportError:
        return None
    return mindspore.get_context("device_target")
