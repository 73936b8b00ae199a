"""The interaction rules that can be decided from the config alone.

1. Full recompute beats select and comm recompute in the same layer.
2. An exclude pattern beats a select pattern it covers (MindFormers gives exclusions the
   highest priority).
3. Recompute beats swap on the same layer or operator: a swap whose
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

from ..document.patterns import covers
from ..family import ModelFamily
from .layout import Layout
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


def resolve(rules: Rules, layout: Layout, *, family: ModelFamily, file: str, warnings=()) -> Plan:
    ledger = _Ledger()
    tables = _Tables(rules)
    outcomes: dict[tuple, _Outcome] = {}  # layers under the same rules resolve alike: decide once
    present = _rules_by_layer(rules, layout.num_layers)
    layers = []
    for layer in range(layout.num_layers):
        signature = (layer in rules.full.layers, *present[layer])
        outcome = outcomes.get(signature)
        if outcome is None:
            outcome = outcomes[signature] = tables.outcome(*signature)
        for event in outcome.events:
            ledger.record(*event, layer)
        stage, chunk = layout.position(layer)
        layers.append(LayerPlan(layer=layer, stage=stage, chunk=chunk, full_recompute=outcome.full,
                                **outcome.uses, layer_swap=outcome.layer_swap, op_swap=outcome.op_swap,
                                op_compress=_layer_compresses(rules, layer, outcome, ledger)))
    return Plan(file=file, layout=layout, rules=rules, family=family, layers=tuple(layers),
                conflicts=ledger.conflicts(),
                warnings=tuple(warnings))


def _rules_by_layer(rules: Rules, num_layers: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    patterns: list[list[int]] = [[] for _ in range(num_layers)]
    swaps: list[list[int]] = [[] for _ in range(num_layers)]
    for index, rule in enumerate(rules.patterns):
        for layer in rule.layers:
            patterns[layer].append(index)
    for index, rule in enumerate(rules.swaps):
        for layer in rule.layers:
            swaps[layer].append(index)
    return [(tuple(sorted(p)), tuple(sorted(w))) for p, w in zip(patterns, swaps)]


def _layer_compresses(rules: Rules, layer: int, outcome, ledger: _Ledger) -> tuple[CompressUse, ...]:
    """Rules 4 and 5 for one layer, after recompute and swap are resolved."""
    compresses = [CompressUse(pattern=rule.pattern, method=rule.method, group_size=rule.group_size,
                              origin=rule.origin, offload=rule.offload, dense=rule.dense)
                  for rule in rules.compresses if layer in rule.layers]
    if outcome.full is not None:
        for use in compresses:
            ledger.record("recompute-over-compress", Party(what="full recompute", origin=outcome.full),
                          _compress_party(use), "dropped", layer)
        return ()
    selected = list(outcome.uses.get(Kind.SELECT.value, ()))
    compresses = _recompute_over_compress(compresses, selected, layer, ledger)
    swaps = ([outcome.layer_swap] if outcome.layer_swap is not None else []) + list(outcome.op_swap)
    return tuple(_compress_with_swap(compresses, swaps, layer, ledger))


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


@dataclass
class _Outcome:
    full: object
    uses: dict
    layer_swap: SwapUse | None
    op_swap: tuple[SwapUse, ...]
    events: list


class _Tables:
    """Which rule covers which, decided once per pair of patterns (in rule order, as the rules read)."""

    def __init__(self, rules: Rules):
        self.rules = rules
        self.uses = [Use(pattern=rule.pattern, origin=rule.origin, default=rule.default) for rule in rules.patterns]
        self.swap_uses = [SwapUse(pattern=rule.pattern, prefetch=rule.prefetch, origin=rule.origin,
                                  default=rule.default) for rule in rules.swaps]
        self.kinds = [rule.kind for rule in rules.patterns]
        by_kind = {kind: [i for i, k in enumerate(self.kinds) if k is kind] for kind in Kind}
        self.coverers = {}  # select/comm index -> exclude indices covering it, in order
        for kind, exclude in ((Kind.SELECT, Kind.EXCLUDE), (Kind.COMM, Kind.COMM_EXCLUDE)):
            for i in by_kind[kind]:
                self.coverers[i] = [j for j in by_kind[exclude]
                                    if covers(rules.patterns[j].pattern, rules.patterns[i].pattern)]
        selects = by_kind[Kind.SELECT]
        self.inside_of = [[] if rule.pattern is None else
                          [i for i in selects if covers(rules.patterns[i].pattern, rule.pattern)]
                          for rule in rules.swaps]
        self.contains = [selects if rule.pattern is None else
                         [i for i in selects if covers(rule.pattern, rules.patterns[i].pattern)]
                         for rule in rules.swaps]

    def outcome(self, full_here: bool, pattern_ids: tuple[int, ...], swap_ids: tuple[int, ...]) -> _Outcome:
        events: list[tuple] = []
        full = self.rules.full.origin if full_here else None
        kept = set(pattern_ids)
        if full is not None:
            full_party = Party(what="full recompute", origin=full)
            for i in pattern_ids:
                if self.kinds[i] in (Kind.SELECT, Kind.COMM):
                    events.append(("full-recompute-over-select", full_party, self._party(i), "dropped"))
                    kept.discard(i)
            events += [("recompute-over-swap", full_party, _swap_party(self.swap_uses[w]), "dropped")
                       for w in swap_ids]
            swap_ids = ()
        for i in pattern_ids:
            if i in kept and i in self.coverers:
                winner = next((j for j in self.coverers[i] if j in kept), None)
                if winner is not None:
                    events.append(("exclude-over-select", self._party(winner), self._party(i), "dropped"))
                    kept.discard(i)
        swaps = [w for w in swap_ids if self._swap_kept(w, kept, events)]
        uses = {kind.value: tuple(self.uses[i] for i in pattern_ids if i in kept and self.kinds[i] is kind)
                for kind in Kind}
        layer_swap = next((self.swap_uses[w] for w in swaps if self.rules.swaps[w].pattern is None), None)
        return _Outcome(full=full, uses=uses, layer_swap=layer_swap, events=events,
                        op_swap=tuple(self.swap_uses[w] for w in swaps if self.rules.swaps[w].pattern is not None))

    def _swap_kept(self, w: int, kept: set[int], events: list[tuple]) -> bool:
        """Rule 3: recompute beats swap; a swap inside a recomputed pattern is dropped, one around it narrowed."""
        swap = _swap_party(self.swap_uses[w])
        inside = next((i for i in self.inside_of[w] if i in kept), None)
        if inside is not None:
            events.append(("recompute-over-swap", self._party(inside), swap, "dropped"))
            return False
        events += [("recompute-over-swap", self._party(i), swap, "narrowed") for i in self.contains[w] if i in kept]
        return True

    def _party(self, index: int) -> Party:
        return _party(self.kinds[index], self.uses[index])


def _party(kind: Kind, use: Use) -> Party:
    return Party(what=f"{_WHAT[kind]} `{use.pattern}`", origin=use.origin, pattern=use.pattern)


def _swap_party(swap: SwapUse) -> Party:
    if swap.pattern is None:
        return Party(what="layer swap", origin=swap.origin)
    what = "default swap strategy" if swap.default else "op swap"
    return Party(what=f"{what} `{swap.pattern}`", origin=swap.origin, pattern=swap.pattern)
