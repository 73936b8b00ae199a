"""The interaction rules that can be decided from the config alone.

1. Full recompute beats select and comm recompute in the same layer (seed 003).
2. An exclude pattern beats a select pattern it covers (MindFormers gives exclusions the
   highest priority).
3. Recompute beats swap on the same layer or operator (seed 001, rule 1): a swap whose
   target lies inside what is recomputed is dropped in that layer; a swap that only
   contains recomputed operators stays, and `apply` leaves those operators unswapped.

4. Recompute beats compression: a compressed cell inside what is recomputed keeps nothing,
   so its compression is dropped in that layer.
5. Compression plus swap of the same cell: both apply, and the swap offloads the
   compressed copy (compress_dense level1 semantics).

Every time two rules meet, a `Conflict` names both, with their YAML lines and layers.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from .layout import Layout
from .patterns import covers
from .plan import CompressUse, Conflict, Effect, LayerPlan, Party, Plan, SwapUse, Use
from .rules import Kind, Rules

_WHAT = {Kind.SELECT: "select recompute", Kind.COMM: "comm recompute",
         Kind.EXCLUDE: "select recompute exclude", Kind.COMM_EXCLUDE: "comm recompute exclude"}


@dataclass
class _Ledger:
    """Collects conflicts, merging the same pair of rules over many layers."""

    layers: dict[tuple[str, Party, Party, Effect], list[int]] = field(default_factory=lambda: defaultdict(list))

    def record(self, rule: str, kept: Party, dropped: Party, effect: Effect, layer: int) -> None:
        self.layers[(rule, kept, dropped, effect)].append(layer)

    def conflicts(self) -> tuple[Conflict, ...]:
        return tuple(Conflict(rule=rule, kept=kept, dropped=dropped, effect=effect, layers=tuple(layers))
                     for (rule, kept, dropped, effect), layers in self.layers.items())


def resolve(rules: Rules, layout: Layout, *, file: str, warnings=()) -> Plan:
    ledger = _Ledger()
    layers = tuple(_layer_plan(rules, layout, layer, ledger) for layer in range(layout.num_layers))
    return Plan(file=file, layout=layout, rules=rules, layers=layers, conflicts=ledger.conflicts(),
                warnings=tuple(warnings))


def _layer_plan(rules: Rules, layout: Layout, layer: int, ledger: _Ledger) -> LayerPlan:
    stage, chunk = layout.position(layer)
    full = rules.full.origin if layer in rules.full.layers else None
    uses = {kind: [Use(pattern=rule.pattern, origin=rule.origin) for rule in rules.of_kind(kind)
                   if layer in rule.layers] for kind in Kind}
    swaps = [SwapUse(pattern=rule.pattern, prefetch=rule.prefetch, origin=rule.origin, default=rule.default)
             for rule in rules.swaps if layer in rule.layers]
    compresses = [CompressUse(pattern=rule.pattern, method=rule.method, group_size=rule.group_size,
                              origin=rule.origin, offload=rule.offload, dense=rule.dense)
                  for rule in rules.compresses if layer in rule.layers]
    if full is not None:
        full_party = Party(what="full recompute", origin=full)
        for use in compresses:
            ledger.record("recompute-over-compress", full_party, _compress_party(use), "dropped", layer)
        compresses = []
        for kind in (Kind.SELECT, Kind.COMM):
            for use in uses[kind]:
                ledger.record("full-recompute-over-select", full_party, _party(kind, use), "dropped", layer)
            uses[kind] = []
        for swap in swaps:
            ledger.record("recompute-over-swap", full_party, _swap_party(swap), "dropped", layer)
        swaps = []
    uses[Kind.SELECT] = _drop_excluded(uses[Kind.SELECT], uses[Kind.EXCLUDE], Kind.SELECT, layer, ledger)
    uses[Kind.COMM] = _drop_excluded(uses[Kind.COMM], uses[Kind.COMM_EXCLUDE], Kind.COMM, layer, ledger)
    swaps = _recompute_over_swap(swaps, uses[Kind.SELECT], layer, ledger)
    compresses = _recompute_over_compress(compresses, uses[Kind.SELECT], layer, ledger)
    compresses = _compress_with_swap(compresses, swaps, layer, ledger)
    layer_swap = next((swap for swap in swaps if swap.pattern is None), None)
    return LayerPlan(layer=layer, stage=stage, chunk=chunk, full_recompute=full,
                     **{kind.value: tuple(uses[kind]) for kind in Kind},
                     layer_swap=layer_swap, op_swap=tuple(swap for swap in swaps if swap.pattern is not None),
                     op_compress=tuple(compresses))


def _recompute_over_compress(compresses: list[CompressUse], recomputed: list[Use], layer: int,
                             ledger: _Ledger) -> list[CompressUse]:
    kept = []
    for use in compresses:
        inside = next((select for select in recomputed if covers(select.pattern, use.pattern)), None)
        if inside is None:
            kept.append(use)
        else:
            ledger.record("recompute-over-compress", _party(Kind.SELECT, inside), _compress_party(use), "dropped",
                          layer)
    return kept


def _compress_with_swap(compresses: list[CompressUse], swaps: list[SwapUse], layer: int,
                        ledger: _Ledger) -> list[CompressUse]:
    result = []
    for use in compresses:
        swap = next((swap for swap in swaps if swap.pattern is None or covers(swap.pattern, use.pattern)), None)
        if swap is not None:
            ledger.record("compress-with-swap", _compress_party(use), _swap_party(swap), "combined", layer)
            use = CompressUse(pattern=use.pattern, method=use.method, group_size=use.group_size, origin=use.origin,
                              offload=swap.prefetch, dense=use.dense)
        result.append(use)
    return result


def _compress_party(use: CompressUse) -> Party:
    what = "compress_dense" if use.dense else "op compress"
    return Party(what=f"{what} `{use.pattern}` ({use.method})", origin=use.origin, pattern=use.pattern)


def _drop_excluded(selected: list[Use], excluded: list[Use], kind: Kind, layer: int,
                   ledger: _Ledger) -> list[Use]:
    kept = []
    for use in selected:
        winner = next((ex for ex in excluded if covers(ex.pattern, use.pattern)), None)
        if winner is None:
            kept.append(use)
        else:
            exclude_kind = Kind.EXCLUDE if kind is Kind.SELECT else Kind.COMM_EXCLUDE
            ledger.record("exclude-over-select", _party(exclude_kind, winner), _party(kind, use), "dropped", layer)
    return kept


def _recompute_over_swap(swaps: list[SwapUse], recomputed: list[Use], layer: int,
                         ledger: _Ledger) -> list[SwapUse]:
    kept = []
    for swap in swaps:
        inside = None if swap.pattern is None else \
            next((use for use in recomputed if covers(use.pattern, swap.pattern)), None)
        if inside is not None:
            ledger.record("recompute-over-swap", _party(Kind.SELECT, inside), _swap_party(swap), "dropped", layer)
            continue
        for use in recomputed:
            if swap.pattern is None or covers(swap.pattern, use.pattern):
                ledger.record("recompute-over-swap", _party(Kind.SELECT, use), _swap_party(swap), "narrowed", layer)
        kept.append(swap)
    return kept


def _party(kind: Kind, use: Use) -> Party:
    return Party(what=f"{_WHAT[kind]} `{use.pattern}`", origin=use.origin, pattern=use.pattern)


def _swap_party(swap: SwapUse) -> Party:
    if swap.pattern is None:
        return Party(what="layer swap", origin=swap.origin)
    what = "default swap strategy" if swap.default else "op swap"
    return Party(what=f"{what} `{swap.pattern}`", origin=swap.origin, pattern=swap.pattern)
