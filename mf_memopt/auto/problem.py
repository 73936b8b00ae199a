"""From a training YAML to one search problem per pipeline stage (options per layer, limits)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..config.plan import Plan
from ..estimate.effects import keeps_communication
from ..estimate.family import estimator_of
from ..estimate.memory import in_flight, stage_params
from ..estimate.spec import ModelSpec, OptimizerSpec, ParallelSpec
from ..estimate.transfer import Hardware
from .choices import Choice, Footprint, footprints
from .limits import AscendStage, CpuStage, cpu_terms
from .solver import Option
from .timing import TimeTable


@dataclass(frozen=True, slots=True, kw_only=True)
class StageProblem:
    stage: int
    layers: tuple[int, ...]             # forward order
    chunk_starts: frozenset[int]        # positions where an interleave chunk begins
    positions: tuple[tuple[Option, ...], ...]
    limits: AscendStage | CpuStage
    compute_s: float                    # per step: forward + backward of every micro-batch


def stage_problems(plan: Plan, spec: tuple[ModelSpec, ParallelSpec, OptimizerSpec], choices: tuple[Choice, ...],
                   *, runtime: str, hardware: Hardware, times: TimeTable | None = None) -> list[StageProblem]:
    """With `times` (a measured profile, `timing.py`), each choice's added time is the profile's per layer and
    step instead of its recompute FLOPs at the hardware's throughput."""
    model, parallel, optimizer = spec
    family = plan.family
    estimator = estimator_of(family)
    ops = {kind: estimator.layer_ops(kind, parallel) for kind in model.layer_kinds}
    kinds = {kind: footprints(choices, estimator.inventory(kind, parallel, runtime), ops[kind], family,
                              communication(plan, kind, parallel, runtime), model=kind,
                              element_bytes=saved_element(kind, runtime))
             for kind in model.layer_kinds}
    seconds = {kind: hardware.seconds(sum(op.flops for op in ops[kind])) for kind in model.layer_kinds}
    mtp = mtp_prints(plan, model, parallel, choices, runtime, hardware)
    steps = parallel.micro_batches * parallel.grad_accumulation
    problems = []
    terms = None
    for stage in range(plan.layout.stages):
        members = [layer for layer in plan.layers if layer.stage == stage]
        n = len(members)
        starts = frozenset(index for index, layer in enumerate(members)
                           if index == 0 or layer.chunk != members[index - 1].chunk)
        first, last = stage == 0, stage == plan.layout.stages - 1
        # the MTP layers take the last decoder layer's plan: the last position's choice is theirs too
        at = [kinds[model.layer_model(layer.layer)] for layer in members]
        forward = [seconds[model.layer_model(layer.layer)] for layer in members]
        if last and mtp is not None:
            at[-1] = tuple(_with_followers(footprint, mtp[0]) for footprint in at[-1])
            forward[-1] += mtp[1]
        if runtime == "cpu":
            prints = at[0]
            terms = cpu_terms(family, model, {footprint.choice: footprint.effect for footprint in prints},
                              {footprint.choice: footprint.attention_rebuilt for footprint in prints}, n)
            limits: AscendStage | CpuStage = CpuStage(family=family, model=model, terms=terms, positions=n)
        else:
            limits = AscendStage(model=model, parallel=parallel, optimizer=optimizer,
                                 params=stage_params(model, parallel, [layer.layer for layer in members], first,
                                                     last),
                                 factor=in_flight(stage, parallel, plan.layout.chunks), first=first, last=last,
                                 positions=n)
        remaining = [0.0] * n       # forward seconds after each position (the MTP layers' included)
        for index in range(n - 2, -1, -1):
            remaining[index] = remaining[index + 1] + forward[index + 1]
        positions = tuple(tuple(option for footprint in at[index]
                                if (option := _option(footprint, runtime, forward[index], remaining[index], steps,
                                                      hardware, times)))
                          for index in range(n))
        problems.append(StageProblem(stage=stage, layers=tuple(layer.layer for layer in members), chunk_starts=starts,
                                     positions=positions, limits=limits, compute_s=steps * 3 * sum(forward)))
    return problems


def mtp_prints(plan: Plan, model: ModelSpec, parallel: ParallelSpec, choices: tuple[Choice, ...], runtime: str,
                hardware: Hardware) -> tuple[dict[Choice, Footprint], float] | None:
    """Each choice's footprint on all the MTP layers together, and their forward seconds; None without MTP."""
    if not model.mtp_layers:
        return None
    family = plan.family
    estimator = estimator_of(family)
    ops = estimator.mtp_ops(model, parallel)
    prints = footprints(choices, estimator.mtp_inventory(model, parallel, runtime), ops, family,
                        communication(plan, model, parallel, runtime), model=model,
                        element_bytes=saved_element(model, runtime))
    return ({footprint.choice: _times(footprint, model.mtp_layers) for footprint in prints},
            model.mtp_layers * hardware.seconds(sum(op.flops for op in ops)))


def saved_element(kind: ModelSpec, runtime: str) -> int:
    """Bytes of a saved element as the estimator counts a compressed tensor's elements (`estimate.core`)."""
    return 4 if runtime == "cpu" else kind.compute_bytes


def communication(plan: Plan, kind: ModelSpec, parallel: ParallelSpec, runtime: str) -> list:
    """What a fully recomputed layer of `kind` keeps of its tensor-parallel communication, as the estimator counts
    it for the plan's options (the written YAML keeps `mp_comm_recompute` as it was)."""
    if not keeps_communication(plan.rules.options.mp_comm_recompute, parallel, runtime):
        return []
    return estimator_of(plan.family).kept_communication(kind, parallel)


def _times(footprint: Footprint, count: int) -> Footprint:
    effect = footprint.effect
    return replace(footprint, effect=replace(effect, tensors=effect.tensors * count,
                                             recompute_flops=effect.recompute_flops * count,
                                             codec=effect.codec * count),
                   rebuilt_at_once=footprint.rebuilt)


def _with_followers(footprint: Footprint, followers: dict[Choice, Footprint]) -> Footprint:
    """A layer's footprint with its followers' under the same choice: their tensors and recompute added; what is
    rebuilt at once is the larger of the layer's and one follower's (each layer's backward rebuilds its own)."""
    other = followers[footprint.choice]
    effect = footprint.effect
    return replace(footprint, effect=replace(effect, tensors=effect.tensors + other.effect.tensors,
                                             recompute_flops=effect.recompute_flops + other.effect.recompute_flops,
                                             codec=effect.codec + other.effect.codec,
                                             backward_extra=max(effect.backward_extra, other.effect.backward_extra)),
                   attention_rebuilt=footprint.attention_rebuilt or other.attention_rebuilt,
                   rebuilt_at_once=max(footprint.rebuilt, other.rebuilt))


def _option(footprint: Footprint, runtime: str, forward_s: float, remaining_s: float, steps: int,
            hardware: Hardware, times: TimeTable | None = None) -> Option | None:
    recompute_s = hardware.added_seconds(footprint.effect)
    if times is not None:   # the profile's time is per whole step already: no micro-batch factor
        recompute_s, steps = times.seconds(footprint.choice), 1
    if runtime == "cpu":   # nothing moves on CPU: a swapped tensor stays in the pool
        return Option(choice=footprint.choice, kept=footprint.kept, rebuilt=footprint.rebuilt, swapped=0,
                      attention=footprint.attention_rebuilt, seconds=steps * recompute_s)
    if not footprint.choice.swaps:
        return Option(choice=footprint.choice, kept=footprint.kept, rebuilt=footprint.held_in_backward, swapped=0,
                      attention=footprint.attention_rebuilt, seconds=steps * recompute_s)
    prefetch = hidden_prefetch(hardware.transfer(footprint.swapped), forward_s, remaining_s,
                               hardware.operators_per_layer)
    if prefetch is None or not footprint.swapped:
        return None
    # the swap is hidden: it adds no time (the search breaks ties toward swapping less)
    return Option(choice=footprint.choice, kept=footprint.kept, rebuilt=footprint.held_in_backward,
                  swapped=footprint.swapped, attention=footprint.attention_rebuilt, seconds=steps * recompute_s,
                  prefetch=prefetch)


def hidden_prefetch(transfer_s: float, forward_s: float, remaining_s: float, operators: int) -> int | None:
    """The backward_prefetch that hides a swap of a layer whose forward takes `forward_s`, with `remaining_s` of
    forward after it in its stage, or None if none can.

    In the estimator's timeline (`estimate/transfer.py`) the copy to the host starts when the
    layer's forward ends and the release `prefetch` operators later (`prefetch` x forward / operators
    per layer) waits for it; the copy back starts `prefetch` operators before the layer's backward
    (twice the forward, or more). A swap is offered only when its copy takes no longer than one
    layer's forward: then the copy is done before the next layer's copy starts, in both directions,
    so no copy queues behind another and the prefetch covering the copy hides it completely (no
    stall; the search's time is the estimator's). The release must also come strictly before the
    forward/backward turn, or the tensor never leaves the device: never on a stage's last layer,
    and on the one before it only when the release comes before the last layer's forward ends.
    """
    if transfer_s > forward_s or forward_s <= 0:
        return None
    prefetch = max(1, math.ceil(transfer_s * operators / forward_s - 1e-9))
    if prefetch * forward_s / operators >= remaining_s * (1 - 1e-9):
        return None
    return prefetch
