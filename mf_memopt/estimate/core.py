"""`estimate_config`: the memory and swap-traffic estimate of a training YAML, before any training."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..compress.family import compression_of
from ..config.load import Document, load_document
from ..config.plan import LayerPlan, Plan
from ..document.errors import ConfigIssue, raise_if_errors
from ..document.source import Source
from .budget import device_budget
from .compress import compress_effect
from .effects import LayerEffect, keeps_communication, layer_effect, with_kept_communication
from .family import cpu_pool_peak, estimator_of, read_spec
from .memory import StagePeak, ascend_peak, in_flight, seqpipe_note, stage_params
from .spec import ModelSpec, OptimizerSpec, ParallelSpec
from .step import StepForm, step_form
from .transfer import UNSOURCED, Hardware, LayerTransfer, swap_timeline
from .versions import runtime_version_notes

RUNTIMES = ("ascend", "cpu")


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerEstimate:
    layer: int
    stage: int
    chunk: int
    effect: LayerEffect
    transfer: LayerTransfer
    mtp: int | None = None      # the index of a multi-token-prediction layer (`layer` numbers it after the decoder)

    @property
    def label(self) -> str:
        """How reports name it: the decoder layer's index, or `mtp.N`."""
        return str(self.layer) if self.mtp is None else f"mtp.{self.mtp}"

    def to_dict(self) -> dict:
        return {"layer": self.layer, "stage": self.stage, "chunk": self.chunk, "mtp": self.mtp,
                "saved_bytes": self.effect.bytes(), "kept_bytes": self.effect.bytes("kept"),
                "recomputed_bytes": self.effect.bytes("recomputed"), "swapped_bytes": self.effect.bytes("swapped"),
                "recompute_flops": self.effect.recompute_flops,
                "operators": [{"path": item.saved.path, "tensor": item.saved.what, "bytes": item.saved.nbytes,
                               "fate": item.fate, "rule": item.rule, "backward_prefetch": item.prefetch,
                               "cpu_only": item.saved.cpu_only} for item in self.effect.tensors],
                "transfer": asdict(self.transfer), "notes": list(self.effect.notes)}


@dataclass(frozen=True, slots=True, kw_only=True)
class StageEstimate:
    stage: int
    layers: tuple[int, ...]
    parameters: int
    in_flight: float
    peak: StagePeak
    host_bytes: int                 # swapped activations held in host memory
    traffic_bytes: int              # per step and direction (device->host, and back)
    compute_s: float                # per step: forward + backward of every micro-batch
    recompute_s: float
    stall_s: float
    fits: bool
    codec_s: float = 0.0            # per step: compress and restore (the methods `Hardware.codec_gbps` prices)

    @property
    def overhead(self) -> float:
        return (self.recompute_s + self.codec_s + self.stall_s) / self.compute_s if self.compute_s else 0.0

    def to_dict(self) -> dict:
        return {"stage": self.stage, "layers": list(self.layers), "parameters": self.parameters,
                "in_flight_micro_batches": self.in_flight, "peak_bytes": self.peak.peak,
                "peak_at": self.peak.checkpoint, "components": dict(self.peak.components),
                "static_bytes": self.peak.part("static"), "activation_bytes": self.peak.part("activations"),
                "working_bytes": self.peak.part("working"),
                "host_bytes": self.host_bytes, "d2h_bytes_per_step": self.traffic_bytes,
                "h2d_bytes_per_step": self.traffic_bytes, "compute_seconds": self.compute_s,
                "recompute_seconds": self.recompute_s, "codec_seconds": self.codec_s,
                "swap_stall_seconds": self.stall_s,
                "overhead": self.overhead, "fits": self.fits}


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    config: str
    runtime: str
    hardware: Hardware
    model: ModelSpec
    parallel: ParallelSpec
    stages: tuple[StageEstimate, ...]
    layers: tuple[LayerEstimate, ...]
    notes: tuple[str, ...]
    step: StepForm | None = None            # the training step assumed (MindFormers' template filled in)
    budget_source: str = ""                 # where hardware.device_memory came from (`budget.device_budget`)

    def to_dict(self) -> dict:
        return {"config": self.config, "runtime": self.runtime, "hardware": asdict(self.hardware),
                "budget": {"bytes": self.hardware.device_memory, "source": self.budget_source},
                "hardware_source": UNSOURCED,
                "model": self.model.to_dict(), "parallel": asdict(self.parallel),
                "step_form": asdict(self.step) if self.step else None,
                "stages": [stage.to_dict() for stage in self.stages],
                "layers": [layer.to_dict() for layer in self.layers], "notes": list(self.notes)}


def estimate_config(config: str | Path | Document, *, runtime: str = "ascend",
                    hardware: Hardware | None = None) -> Estimate:
    """Validate and plan the YAML (a path, read here, or a document already read), then estimate every stage's
    peak memory and swap traffic. Without `hardware.device_memory` each stage is held to the YAML's budget
    (`budget.device_budget`)."""
    return estimate_source(load_document(config), runtime=runtime, hardware=hardware)


def estimate_source(config: Source | Document, *, runtime: str = "ascend", hardware: Hardware | None = None
                    ) -> Estimate:
    """`estimate_config` of an already loaded YAML (a document, or a source written in memory by `auto`)."""
    document = load_document(config)
    source, plan = document.source, document.planned()
    issues: list[ConfigIssue] = []
    spec = read_spec(source, plan.family, issues, runtime=runtime)
    if runtime == "cpu" and plan.layout.stages > 1:
        issues.append(source.issue(("parallel_config", "pipeline_stage"), "the cpu runtime models the launcher's "
                                   "single-stage training", "estimate pipeline configs with the ascend runtime"))
    hardware = hardware or Hardware()
    budget = device_budget(source, runtime, hardware.device_memory, issues)
    raise_if_errors(issues)
    assert spec is not None
    estimate = _estimate(plan, *spec, runtime=runtime, hardware=replace(hardware, device_memory=budget.nbytes))
    return replace(estimate, step=step_form(source), budget_source=budget.source)


def _estimate(plan: Plan, model: ModelSpec, parallel: ParallelSpec, optimizer: OptimizerSpec, *, runtime: str,
              hardware: Hardware) -> Estimate:
    family = plan.family
    estimator = estimator_of(family)
    element_bytes = 4 if runtime == "cpu" else model.compute_bytes
    compression = compression_of(family) if any(layer.op_compress for layer in plan.layers) else None
    keeps = keeps_communication(plan.rules.options.mp_comm_recompute, parallel, runtime)

    def effect_of(layer: LayerPlan, inventory: list, ops: list, kind: ModelSpec) -> tuple[LayerEffect, int]:
        """The layer's effect under its plan, and its forward FLOPs."""
        effect = compress_effect(layer, layer_effect(layer, inventory, ops, family.cell_outputs,
                                                     family.primitive_recompute), compression, element_bytes, model)
        if keeps and layer.full_recompute is not None:
            effect = with_kept_communication(effect, estimator.kept_communication(kind, parallel))
        return effect, sum(op.flops for op in ops)

    kinds = {kind: (estimator.inventory(kind, parallel, runtime), estimator.layer_ops(kind, parallel))
             for kind in model.layer_kinds}
    units = {layer.layer: effect_of(layer, *kinds[model.layer_model(layer.layer)], model.layer_model(layer.layer))
             for layer in plan.layers}
    if model.mtp_layers:
        # MindFormers gives each MTP layer the last decoder layer's id: its stage and plan
        last = plan.layers[-1]
        inventory, ops = estimator.mtp_inventory(model, parallel, runtime), estimator.mtp_ops(model, parallel)
        for index in range(model.mtp_layers):
            follower = replace(last, layer=plan.num_layers + index)
            units[follower.layer] = effect_of(follower, inventory, ops, model)
    layers, stages = [], []
    for stage in range(plan.layout.stages):
        members = [layer for layer in plan.layers if layer.stage == stage]
        if stage == plan.layout.stages - 1:
            members += [replace(plan.layers[-1], layer=plan.num_layers + index) for index in range(model.mtp_layers)]
        stage_effects = [units[layer.layer][0] for layer in members]
        flops = [units[layer.layer][1] for layer in members]
        transfers = swap_timeline(stage_effects, flops, hardware)
        layers += [LayerEstimate(layer=layer.layer, stage=stage, chunk=layer.chunk, effect=effect, transfer=transfer,
                                 mtp=layer.layer - plan.num_layers if layer.layer >= plan.num_layers else None)
                   for layer, effect, transfer in zip(members, stage_effects, transfers)]
        stages.append(_stage(model, parallel, optimizer, plan, stage, stage_effects, transfers, runtime, hardware,
                             sum(flops)))
    notes = sorted({note for effect, _ in units.values() for note in effect.notes})
    notes += codec_notes([effect for effect, _ in units.values()], hardware)
    if runtime == "cpu":
        notes += runtime_version_notes(estimator.cpu_measured_on)
    elif seqpipe_note(parallel):
        notes.append(seqpipe_note(parallel))
    return Estimate(config=plan.file, runtime=runtime, hardware=hardware, model=model, parallel=parallel,
                    stages=tuple(stages), layers=tuple(layers), notes=tuple(notes))


def _stage(model: ModelSpec, parallel: ParallelSpec, optimizer: OptimizerSpec, plan: Plan, stage: int,
           effects: list[LayerEffect], transfers: list[LayerTransfer], runtime: str, hardware: Hardware,
           forward_flops: int) -> StageEstimate:
    """One stage's peak and time; `effects` are its decoder layers' and, on the last stage, the MTP layers';
    `forward_flops` their forward's sum."""
    first, last = stage == 0, stage == plan.layout.stages - 1
    decoder = tuple(layer.layer for layer in plan.layers if layer.stage == stage)
    params = stage_params(model, parallel, decoder, first, last)
    factor = in_flight(stage, parallel, plan.layout.chunks)
    if runtime == "cpu":
        peak = cpu_pool_peak(plan.family, model, effects)
    else:
        peak = ascend_peak(model, parallel, optimizer, params=params, effects=effects, transfers=transfers,
                           factor=factor, first=first, last=last)
    steps = parallel.micro_batches * parallel.grad_accumulation
    swapped = sum(effect.bytes("swapped") for effect, transfer in zip(effects, transfers)
                  if not transfer.on_device_at_turn)
    return StageEstimate(
        stage=stage, layers=decoder, parameters=params.total, in_flight=factor,
        peak=peak, host_bytes=round(factor * swapped), traffic_bytes=steps * swapped,
        compute_s=steps * 3 * hardware.seconds(forward_flops),
        recompute_s=steps * hardware.seconds(sum(effect.recompute_flops for effect in effects)),
        stall_s=steps * sum(item.forward_stall_s + item.backward_stall_s for item in transfers),
        fits=peak.peak <= hardware.device_memory, codec_s=steps * sum(map(hardware.codec_seconds, effects)))


def codec_notes(effects: list[LayerEffect], hardware: Hardware) -> list[str]:
    """A note naming the compression methods whose codec time is not counted (no `Hardware.codec_gbps` figure)."""
    unpriced = sorted({method for effect in effects for method, _ in effect.codec} - set(dict(hardware.codec_gbps)))
    if not unpriced:
        return []
    return [f"the codec's time is not counted for {', '.join(unpriced)}: give its compress + restore throughput "
            f"measured on the device with --codec-gbps (e.g. {unpriced[0]}=40, in GB/s of its input)"]
