"""`swap_config` as rules: offload of whole layers (`layer_swap`) or of matched operators (`op_swap`).

With `swap: true` and neither list, the family's default strategy applies (MindFormers' own:
its default pattern in every layer, with `default_prefetch`).
"""

from __future__ import annotations

from ..document.source import KeyPath
from .reader import SectionReader
from .rules import SWAP, SwapRule

DEFAULT_PREFETCH = 1


def swap_rules(reader: SectionReader) -> tuple[SwapRule, ...]:
    if reader.blocked((*SWAP, "swap")):
        return ()
    section = reader.section(SWAP)
    layer_entries = reader.entries(SWAP, "layer_swap")
    op_entries = reader.entries(SWAP, "op_swap")
    if not reader.swap:
        reader.warn_ignored(SWAP, ("layer_swap", "op_swap", "default_prefetch"), (None, []), "swap",
                            "set swap_config.swap: true to swap activations")
        return ()
    if section.get("layer_swap") is None and section.get("op_swap") is None:
        if reader.blocked((*SWAP, "default_prefetch")):
            return ()
        return (_default_strategy(reader, section),)
    if "default_prefetch" in section:
        reader.warn((*SWAP, "default_prefetch"), "ignored: default_prefetch only sets the default strategy, which "
                    "layer_swap/op_swap replace", "give backward_prefetch in each entry instead")
    rules = [_layer_swap_rule(reader, entry, path) for entry, path in layer_entries]
    rules += [rule for entry, path in op_entries for rule in _op_swap_rules(reader, entry, path)]
    if not layer_entries and not op_entries:
        reader.warn(SWAP, "swap is true but layer_swap and op_swap are empty: nothing is swapped",
                    "remove both to use the default strategy, or list what to swap")
    reader.reject_overlaps(rules, "swapped")
    return tuple(rules)


def _default_strategy(reader: SectionReader, section: dict) -> SwapRule:
    prefetch = section.get("default_prefetch", DEFAULT_PREFETCH)
    where = (*SWAP, "default_prefetch") if "default_prefetch" in section else (*SWAP, "swap")
    return SwapRule(pattern=reader.family.defaults.swap, prefetch=prefetch, layers=reader.every_layer(),
                    origin=reader.origin(where), default=True)


def _layer_swap_rule(reader: SectionReader, entry: dict, path: KeyPath) -> SwapRule:
    return SwapRule(pattern=None, prefetch=entry["backward_prefetch"],
                    layers=reader.listed_layers(entry["layers"], (*path, "layers")), origin=reader.origin(path))


def _op_swap_rules(reader: SectionReader, entry: dict, path: KeyPath) -> list[SwapRule]:
    layers = reader.listed_layers(entry["layers"], (*path, "layers"))
    return [SwapRule(pattern=name, prefetch=entry["backward_prefetch"], layers=layers, origin=reader.origin(path))
            for name, _ in reader.op_names(entry, path)]
