"""`verify`: does the compiled training graph carry exactly the marks the plan asked for?

The training graph is compiled without running (MS_DEV_PRECOMPILE_ONLY) in a child process that builds and
applies exactly as the launcher does, and its IR is compared, layer by layer, with the apply report
(`marks.py`). A pipeline config compiles on Ascend in one msrun worker per device, and each layer is checked
in the graphs of the ranks whose stage holds it (`pipeline.py`); on CPU it is refused before anything is built.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..config.load import Document, load_document
from ..config.plan import Plan
from ..document.errors import ConfigError, ConfigIssue
from ..runs.runner import ChildFailed, compile_graph
from ..runtime.device import preflight_compile
from .ir import find_validate_ir
from .marks import LayerCheck, check_graph
from .pipeline import RankGraph, check_ranks, compile_ranks, require_devices, workers_of
from .precompile import COMPILE_ENV, SAVE_GRAPHS_PATH


@dataclass
class VerifyResult:
    config: str
    ir_path: str
    nodes: int
    seconds: float
    layers: list[LayerCheck]
    ranks: list[RankGraph] = field(default_factory=list)   # a pipeline config's: every rank's graph

    @property
    def agrees(self) -> bool:
        return not any(layer.disagreements for layer in self.layers)

    @property
    def rule2(self) -> list[str]:
        return [item for layer in self.layers for item in layer.rule2]

    def stages(self) -> list[dict]:
        """Per pipeline stage: its ranks, the layers checked there and whether they agree."""
        by_stage: dict[int, dict] = defaultdict(lambda: {"ranks": [], "layers": [], "agrees": True})
        for graph in self.ranks:
            by_stage[graph.stage]["ranks"].append(graph.rank)
        for check in self.layers:
            entry = by_stage[check.stage]
            if check.label not in entry["layers"]:
                entry["layers"].append(check.label)
            entry["agrees"] = entry["agrees"] and not check.disagreements
        return [{"stage": stage, **entry} for stage, entry in sorted(by_stage.items())] if self.ranks else []

    def to_dict(self) -> dict:
        return {**asdict(self), "stages": self.stages(), "agrees": self.agrees}


def verify(config: str | Path | Document, *, ir_dir: str | Path | None = None) -> VerifyResult:
    """Compile `config` (a path, read here, or a document already read) and check its marks against its plan."""
    document = load_document(config)
    plan = document.planned()
    path = document.source.file
    device = preflight_compile(document, plan)           # before the child compiles or writes anything
    workers = workers_of(document.source) if plan.layout.stages > 1 else 1
    if workers > 1:
        require_devices(device, workers, path)
    with tempfile.TemporaryDirectory(prefix="mf_memopt_verify_") as scratch:
        directory = Path(ir_dir) if ir_dir else Path(scratch) / "ir"
        if workers > 1:
            return _verify_ranks(path, plan, directory, Path(scratch) / "reports", workers, kept=bool(ir_dir))
        report_path = Path(scratch) / "apply_report.json"
        began = time.perf_counter()
        _compile(path, directory, report_path)
        seconds = time.perf_counter() - began
        ir_path = find_validate_ir(directory)
        layers, nodes = check_graph(json.loads(report_path.read_text()), ir_path, plan)
    return VerifyResult(config=path, ir_path=str(ir_path) if ir_dir else "(removed)", nodes=nodes,
                        seconds=round(seconds, 1), layers=layers)


def _verify_ranks(config: str | Path, plan: Plan, directory: Path, reports: Path, workers: int, *,
                  kept: bool) -> VerifyResult:
    """A pipeline config: every rank compiled under msrun, each layer checked on the ranks of its stage."""
    began = time.perf_counter()
    compile_ranks(config, directory, reports, workers)
    seconds = time.perf_counter() - began
    layers, ranks = check_ranks(plan, directory, reports, workers)
    return VerifyResult(config=str(config), ir_path=str(directory) if kept else "(removed)",
                        nodes=sum(graph.nodes for graph in ranks), seconds=round(seconds, 1), layers=layers,
                        ranks=ranks)


def _compile(config: str | Path, directory: Path, report: Path) -> None:
    try:
        compile_graph(Path(config), report=report, env={**COMPILE_ENV, SAVE_GRAPHS_PATH: str(directory)})
    except ChildFailed as error:
        raise ConfigError([ConfigIssue(file=str(config), line=None, path="", message=str(error))]) from error


def verify_table(result: VerifyResult) -> str:
    staged = bool(result.ranks)
    what = (f"the training graphs of {len(result.ranks)} ranks under msrun" if staged else "the training graph")
    lines = [f"{result.config}: compiled {what} without running {'them' if staged else 'it'} in {result.seconds} s "
             f"({result.nodes} IR nodes)"]
    rows = [["layer", "recompute (plan)", "recompute copies", "offloaded ops by prefetch", "comm ops", "rule-2",
             "agrees"]]
    compressing = any(check.compressed for check in result.layers)
    if compressing:
        rows[0].insert(-1, "compressed (backward reads only the copy)")
    if staged:
        rows[0][:0] = ["stage", "rank"]
    for check in result.layers:
        offload = ", ".join(f"{count} @ {prefetch}" for prefetch, count in sorted(check.offloaded.items())) or "-"
        rows.append([check.label, ", ".join(check.recompute) or "-", str(check.copies), offload,
                     str(check.comm or "-"), str(len(check.rule2) or "-"), "no" if check.disagreements else "yes"])
        if compressing:
            rows[-1].insert(-1, ", ".join(check.compressed) or "-")
        if staged:
            rows[-1][:0] = [str(check.stage), str(check.rank)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    for check in result.layers:
        where = f" (stage {check.stage}, rank {check.rank})" if staged else ""
        lines += [f"disagreement: layer {check.label}{where}: {item}" for item in check.disagreements]
        lines += [f"conflict: {item}" for item in check.rule2]
        lines += [f"note: layer {check.label}{where}: {item}" for item in check.notes]
    lines += [f"stage {graph.stage}: rank {graph.rank} read {graph.ir_path} ({graph.nodes} IR nodes): layers "
              f"{', '.join(graph.layers)}" for graph in result.ranks]
    verdict = ("the compiled graph agrees with the plan" if result.agrees
               else "the compiled graph DISAGREES with the plan")
    if staged:
        verdict = verdict.replace("graph agrees", "graphs agree").replace("graph DISAGREES", "graphs DISAGREE")
        verdict += f" on {'every stage' if result.agrees else _disagreeing(result)}"
    lines.append(f"{verdict}; {len(result.rule2)} rule-2 conflict(s)")
    return "\n".join(lines)


def _disagreeing(result: VerifyResult) -> str:
    stages = [str(entry["stage"]) for entry in result.stages() if not entry["agrees"]]
    return f"stage{'s' if len(stages) > 1 else ''} {', '.join(stages)}"
