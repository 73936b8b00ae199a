"""`python -m mf_memopt compare BASE CANDIDATE`: does a memory plan change the training?

Both configs are trained with the launcher for the same number of steps, from the same seed,
data and initial weights (they may differ only in the plan's sections: `configs.py`). Each run
records every step's loss and global gradient norm as the exact float32 the step returned, and a
digest of every trained parameter (`runs.py`). The verdict follows from what the candidate
changes:

* recompute, swap and lossless compression run the same arithmetic: every step's numbers and
  every trained parameter must be bit-identical;
* quantised compression (int8, int4, int2) rounds stochastically: the loss of every step must
  stay within `tolerance` (relative) of the base's. When it does not, the quantised uses (one per
  layer and pattern) are bisected, each half trained on its own, to name the ones whose drift
  alone exceeds the tolerance: those to keep exact.

The memory-pool peak of both runs is read as `estimate --measure` reads it.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..config.device import DEVICE_TARGET, device_of
from ..config.load import Document, load_document
from ..document.errors import ConfigError
from ..document.source import Source
from .configs import PLAN_SECTIONS, LossyUse, by_text, check_only_plan_changes, leaves, lossy_uses, with_lossy_uses
from .runs import Run, Step, train_recorded

# A quantised candidate's loss may differ from the base's by this much (relative) at any step. int8 and int4 on the
# MLP's inputs stay well inside it on the shipped configs; int2 on every matmul input does not (docs/compare.md).
DEFAULT_TOLERANCE = 0.01
DATASET_DIR = ("train_dataset", "data_loader", "dataset_dir")


@dataclass(frozen=True, slots=True)
class Probe:
    """One bisection run: the quantised uses kept, and the loss drift they cause on their own."""

    uses: tuple[LossyUse, ...]
    drift: float


@dataclass(slots=True)
class Comparison:
    base: Run
    candidate: Run
    runtime: str
    changes: list[str]                     # "key.path: base -> candidate" inside the plan's sections
    lossy: tuple[LossyUse, ...]            # the candidate's quantised compressions; empty: must be identical
    tolerance: float
    probes: list[Probe] = field(default_factory=list)
    keep_exact: tuple[LossyUse, ...] = ()
    bisect_note: str = ""

    @property
    def exact(self) -> bool:
        return not self.lossy

    def loss_drifts(self) -> list[float | None]:
        return [_relative(b.loss, c.loss) for b, c in zip(self.base.steps, self.candidate.steps)]

    def norm_drifts(self) -> list[float | None]:
        return [_relative(b.global_norm, c.global_norm) for b, c in zip(self.base.steps, self.candidate.steps)]

    def drift(self) -> float:
        return run_drift(self.base.steps, self.candidate.steps)

    def not_finite(self) -> list[int]:
        return not_finite_steps(self.base.steps, self.candidate.steps)

    def first_difference(self) -> int | None:
        return next((b.step for b, c in zip(self.base.steps, self.candidate.steps) if b != c), None)

    def differing_parameters(self) -> list[str]:
        names = set(self.base.parameters) | set(self.candidate.parameters)
        return sorted(name for name in names if self.base.parameters.get(name) != self.candidate.parameters.get(name))

    def equivalent(self) -> bool:
        if len(self.base.steps) != len(self.candidate.steps):
            return False
        if self.exact:
            return self.first_difference() is None and not self.differing_parameters()
        return self.drift() <= self.tolerance

    def verdict(self) -> str:
        if self.exact:
            return "identical" if self.equivalent() else "not identical"
        return "within tolerance" if self.equivalent() else "drifts beyond tolerance"

    def to_dict(self) -> dict[str, Any]:
        """The comparison as JSON values: a loss, norm or drift that is not finite is the string "nan", "inf" or
        "-inf" (JSON has no such numbers; Python's `json` would write the non-standard NaN and Infinity)."""
        return _json_safe({
            "base": self.base.config, "candidate": self.candidate.config, "runtime": self.runtime,
            "changes": self.changes, "kind": "bit-identical" if self.exact else "within tolerance",
            "tolerance": None if self.exact else self.tolerance,
            "steps": [{"step": b.step, "base": _step_dict(b), "candidate": _step_dict(c), "loss_drift": drift,
                       "global_norm_drift": norm}
                      for b, c, drift, norm in zip(self.base.steps, self.candidate.steps, self.loss_drifts(),
                                                   self.norm_drifts())],
            "first_difference": self.first_difference(), "loss_drift": self.drift(),
            "parameters": len(set(self.base.parameters) | set(self.candidate.parameters)),
            "differing_parameters": self.differing_parameters(),
            "peak_bytes": {"base": self.base.peak_bytes, "candidate": self.candidate.peak_bytes},
            "quantised": [use.label() for use in self.lossy],
            "bisection": [{"uses": [use.label() for use in probe.uses], "loss_drift": probe.drift}
                          for probe in self.probes],
            "keep_exact": [use.label() for use in self.keep_exact], "bisect_note": self.bisect_note,
            "verdict": self.verdict(), "equivalent": self.equivalent(),
        })


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    return value


def _step_dict(step: Step) -> dict[str, Any]:
    return {"loss": step.loss, "global_norm": step.global_norm, "overflow": step.overflow,
            "loss_scale": step.loss_scale}


def _relative(base: float | None, candidate: float | None) -> float | None:
    """The candidate's relative difference from the base; infinite when only one of them is finite (or the base
    is 0), nothing when the step did not record the number."""
    if base is None or candidate is None:
        return None
    if base == candidate or (math.isnan(base) and math.isnan(candidate)):
        return 0.0
    if not (math.isfinite(base) and math.isfinite(candidate)) or not base:
        return math.inf
    return abs(candidate - base) / abs(base)


def not_finite_steps(base: Sequence[Step], candidate: Sequence[Step]) -> list[int]:
    """The steps where the candidate's loss or global gradient norm is NaN or infinite and the base's is finite."""
    def lost(b: float | None, c: float | None) -> bool:
        return b is not None and c is not None and math.isfinite(b) and not math.isfinite(c)

    return [c.step for b, c in zip(base, candidate) if lost(b.loss, c.loss) or lost(b.global_norm, c.global_norm)]


def run_drift(base: Sequence[Step], candidate: Sequence[Step]) -> float:
    """The worst relative loss drift over the steps; infinite when the candidate stops being finite where the base
    is (`max` alone would skip a NaN that does not come first)."""
    if not_finite_steps(base, candidate):
        return math.inf
    drifts = [_relative(b.loss, c.loss) for b, c in zip(base, candidate)]
    return max((math.inf if math.isnan(d) else d for d in drifts if d is not None), default=0.0)


def compare_configs(base: str | Path, candidate: str | Path, *, steps: int, runtime: str | None = None,
                    tolerance: float = DEFAULT_TOLERANCE, bisect: bool = True, max_runs: int = 8,
                    work_dir: str | Path | None = None, progress=print) -> Comparison:
    """Train both and compare (ConfigError for configs that differ outside the plan, or are invalid)."""
    base_document, candidate_document = load_document(base), load_document(candidate)   # each read once, here
    base_document.planned()                             # both must be valid configs: every problem at once
    candidate_plan = candidate_document.planned()
    check_only_plan_changes(base_document, candidate_document)
    base_source, candidate_source = base_document.source, candidate_document.source
    runtime = training_runtime(base_source, runtime)
    dataset = _dataset(base_source)
    lossy = tuple(lossy_uses(candidate_plan))
    with tempfile.TemporaryDirectory(prefix="mf_memopt_compare_", dir=work_dir) as tmp:
        work = Path(tmp)
        progress(f"training the base {base} for {steps} step(s) ...")
        base_run = train_recorded(Path(base), steps=steps, work=work / "base", runtime=runtime, dataset=dataset)
        progress(f"training the candidate {candidate} for {steps} step(s) ...")
        candidate_run = train_recorded(Path(candidate), steps=steps, work=work / "candidate", runtime=runtime,
                                       dataset=dataset)
        result = Comparison(base=base_run, candidate=candidate_run, runtime=runtime,
                            changes=_plan_changes(base_document, candidate_document), lossy=lossy,
                            tolerance=tolerance)
        if lossy and bisect and not result.equivalent():
            _bisect(result, candidate_source, base_run, work, steps=steps, runtime=runtime, dataset=dataset,
                    max_runs=max_runs, progress=progress)
    return result


def training_runtime(source: Source, asked: str | None = None) -> str:
    """The runtime of the base's device (`config.device`: ascend when context.device_target is not set), where both
    runs train whatever `--runtime` says: `asked` naming another is a `ConfigError` at that key, before any training
    (as `estimate --measure` refuses it: `runs/measure.py`)."""
    device = device_of(source)
    if asked is not None and asked != device.runtime:
        target = "CPU" if asked == "cpu" else "Ascend"
        raise ConfigError([source.issue(DEVICE_TARGET, f"--runtime {asked}, but the YAML trains on {device.describe()}",
                                        f"leave --runtime out, or set context.device_target: {target}")])
    return device.runtime


def _dataset(source: Source) -> Path | None:
    value = source.get(DATASET_DIR)
    return Path(str(value)).resolve() if value else None


def _plan_changes(base: Document, candidate: Document) -> list[str]:
    views = [dict(leaves(document.view.data)) for document in (base, candidate)]
    paths = sorted({path for view in views for path in view if path[0] in PLAN_SECTIONS}, key=by_text)

    def shown(view: dict, path: tuple) -> str:
        return repr(view[path]) if path in view else "(not set)"

    return [f"{'.'.join(map(str, path))}: {shown(views[0], path)} -> {shown(views[1], path)}"
            for path in paths if shown(views[0], path) != shown(views[1], path)]


def _bisect(result: Comparison, candidate: Source, base_run: Run, work: Path, *, steps: int, runtime: str,
            dataset: Path | None, max_runs: int, progress) -> None:
    """Halve the quantised uses until each half's own drift is known; the single uses over the tolerance are the
    ones to keep exact. Stops after `max_runs` trainings and says what it could not narrow down."""
    runs = 0

    def drift_of(uses: tuple[LossyUse, ...]) -> float:
        nonlocal runs
        runs += 1
        path = work / "variants" / f"v{runs:02d}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(with_lossy_uses(candidate.data, uses), sort_keys=False))
        progress(f"bisecting: training with {len(uses)} of {len(result.lossy)} quantised use(s) ...")
        run = train_recorded(path, steps=steps, work=work / f"probe{runs:02d}", runtime=runtime, dataset=dataset)
        drift = run_drift(base_run.steps, run.steps)
        result.probes.append(Probe(uses=uses, drift=drift))
        return drift

    def culprits(uses: tuple[LossyUse, ...]) -> tuple[LossyUse, ...]:
        if len(uses) == 1:
            return uses
        middle = len(uses) // 2
        found: tuple[LossyUse, ...] = ()
        for half in (uses[:middle], uses[middle:]):
            if runs >= max_runs:
                result.bisect_note = (f"stopped after {runs} bisection run(s) (--max-runs {max_runs}); "
                                      f"{len(half)} use(s) not tried on their own")
                return found + half
            if drift_of(half) > result.tolerance:
                found += culprits(half)
        if not found:
            result.bisect_note = "no half drifts beyond the tolerance on its own: the uses drift together"
            return uses
        return found

    result.keep_exact = culprits(result.lossy)
