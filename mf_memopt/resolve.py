"""The interaction rules that can be decided from the config alone.

1. Full recompute beats select and comm recompute in the same layer (seed 003).
2. An exclude pattern beats a select pattern it covers (MindFormers gives exclusions the
   highest priority).
3. Recompute beats swap on the same layer or operator (seed 001, rule 1): a swap whose
   target lies inside what is recomputed is dropped in that layer; a swap that only
   contains recomputed operators stays, and `apply` leaves those operators unswapped.

Every time two rules meet, a `Conflict` names both, with their YAML lines and layers.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from .layout import Layout
from .patterns import covers
from .plan import Conflict, Effect, LayerPlan, Party, Plan, SwapUse, Use
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
    outcomes: dict[tuple, _Outcome] = {}  # layers under the same rules resolve alike: decide once
    layers = []
    for layer in range(layout.num_layers):
        signature = _signature(rules, layer)
        outcome = outcomes.get(signature)
        if outcome is None:
            outcome = outcomes[signature] = _outcome(rules, *signature)
        for event in outcome.events:
            ledger.record(*event, layer)
        stage, chunk = layout.position(layer)
        layers.append(LayerPlan(layer=layer, stage=stage, chunk=chunk, full_recompute=outcome.full,
                                **outcome.uses, layer_swap=outcome.layer_swap, op_swap=outcome.op_swap))
    return Plan(file=file, layout=layout, rules=rules, layers=tuple(layers), conflicts=ledger.conflicts(),
                warnings=tuple(warnings))


@dataclass
class _Outcome:
    full: object
    uses: dict
    layer_swap: SwapUse | None
    op_swap: tuple[SwapUse, ...]
    events: list


class _Recorder:
    """Collects one layer's conflicts, to be replayed on every layer with the same rules."""

    def __init__(self):
        self.events: list[tuple] = []

    def record(self, rule: str, kept: Party, dropped: Party, effect: Effect, _layer: int | None) -> None:
        self.events.append((rule, kept, dropped, effect))


def _signature(rules: Rules, layer: int) -> tuple:
    return (layer in rules.full.layers,
            tuple(index for index, rule in enumerate(rules.patterns) if layer in rule.layers),
            tuple(index for index, rule in enumerate(rules.swaps) if layer in rule.layers))


def _outcome(rules: Rules, full_here: bool, pattern_ids: tuple[int, ...], swap_ids: tuple[int, ...]) -> _Outcome:
    ledger, layer = _Recorder(), None
    full = rules.full.origin if full_here else None
    chosen = [rules.patterns[index] for index in pattern_ids]
    uses = {kind: [Use(pattern=rule.pattern, origin=rule.origin) for rule in chosen if rule.kind is kind]
            for kind in Kind}
    swaps = [SwapUse(pattern=rule.pattern, prefetch=rule.prefetch, origin=rule.origin, default=rule.default)
             for rule in (rules.swaps[index] for index in swap_ids)]
    if full is not None:
        full_party = Party(what="full recompute", origin=full)
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
    layer_swap = next((swap for swap in swaps if swap.pattern is None), None)
    return _Outcome(full=full, uses={kind.value: tuple(uses[kind]) for kind in Kind}, layer_swap=layer_swap,
                    op_swap=tuple(swap for swap in swaps if swap.pattern is not None), events=ledger.events)


def _drop_excluded(selected: list[Use], excluded: list[Use], kind: Kind, layer: int | None,
                   ledger: _Recorder) -> list[Use]:
    kept = []
    for use in selected:
        winner = next((ex for ex in excluded if covers(ex.pattern, use.pattern)), None)
        if winner is None:
            kept.append(use)
        else:
            exclude_kind = Kind.EXCLUDE if kind is Kind.SELECT else Kind.COMM_EXCLUDE
            ledger.record("exclude-over-select", _party(exclude_kind, winner), _party(kind, use), "dropped", layer)
    return kept


def _recompute_over_swap(swaps: list[SwapUse], recomputed: list[Use], layer: int | None,
                         ledger: _Recorder) -> list[SwapUse]:
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
