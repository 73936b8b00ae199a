"""One msrun worker of a pipeline config, taken along the launcher's Ascend path up to MindSpore's compile entry.

Run by tests/mindspore/test_pipeline_precompile.py under msrun on this machine's CPU (`python pipeline_precompile.py CONFIG
OUT_DIR`). The run is the launcher's `session.prepare` and `train.train` step by step, with two differences:
the launcher's checks, which refuse a pipeline config on CPU, are not called (`session.assemble` instead of
`session.prepare`); and MindSpore's device is the CPU (the only one here) while the build, the plan and
MindFormers' Trainer take their Ascend branches (`build_for="Ascend"`: no CPU stand-ins, no CPU training step). MindFormers' `build_context` sets semi-auto parallel with the YAML's
pipeline stages and initialises the communication as msrun's workers do; the Trainer then wraps the model,
builds the dataset and enters `_CellGraphExecutor.compile`, which this worker intercepts: what it was handed
is written as JSON to OUT_DIR/rank_<r>.json, and nothing is compiled.

It is also the rank worker of `verify` on a pipeline config (`mf_memopt.verify.precompile_child ... --ranks`) up to the
same point: the test starts it with verify's msrun command and environment, and the worker takes its report file,
its IR directory and the launcher's overrides from verify's worker (`rank_outputs`, `overrides_for`), writing its
apply report where verify reads it (OUT_DIR/reports/rank_<r>.json).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from mf_memopt.apply.family import backend_of


class CompileReached(Exception):
    """Raised at MindSpore's compile entry: the path up to it has run."""


def main(config: str, out: str) -> int:
    from mf_memopt.verify.precompile import SAVE_GRAPHS_PATH, overrides_for, rank_outputs

    report_path = rank_outputs(Path(out) / "reports")        # before MindSpore is imported, as verify's worker
    from mf_memopt.config.load import load_document

    document = load_document(config)
    overrides = overrides_for(document, report_path, ranks=True)

    from mindspore.common.api import _CellGraphExecutor
    from mindspore.parallel._utils import _get_global_rank, _get_stage_device_num

    from mf_memopt.apply.execute import find_layers
    from mf_memopt.runtime.environment import configure_logging
    from mf_memopt.runtime.session import assemble, stage_line
    from mf_memopt.runtime.train import train

    configure_logging()
    plan = document.planned()
    session = assemble(document, plan, overrides, build_for="Ascend")
    report_path.write_text(session.report.to_json() + "\n")
    run, mf_config = session.run, session.config
    layers = find_layers(session.network, plan)
    followers = backend_of(plan.family).follower_layers(session.network)          # the MTP layers
    seen: dict = {}

    def compile_entry(self, obj, *args, **kwargs):
        seen["cell"], seen["args"] = obj, args
        raise CompileReached

    _CellGraphExecutor.compile = compile_entry
    try:
        train(session.network, mf_config, device_target="Ascend", compile_only=True)
    except CompileReached:
        pass
    result = {"rank": run.rank, "world_size": run.world_size, "stage_line": stage_line(plan.layout, run.rank,
                                                                                         run.world_size),
              "reached_compile": "cell" in seen,
              "cells": _wrapping(seen.get("cell")),
              "inputs": [list(arg.shape) for arg in seen.get("args", ()) if hasattr(arg, "shape")],
              "batch_size": int(mf_config.runner_config.batch_size),
              "micro_batch_num": int(mf_config.parallel_config.micro_batch_num),
              "wrapper": str(mf_config.runner_wrapper.type),
              "pipeline_stage": [int(layer.pipeline_stage) for layer in layers],
              "follower_stage": [int(layer.pipeline_stage) for layer in followers],
              "layer_recompute": [bool(layer._has_config_recompute) for layer in layers],
              "report": json.loads(session.report.to_json()),
              "report_path": str(report_path), "save_graphs_path": os.environ[SAVE_GRAPHS_PATH],
              # MindSpore's own stage of this rank under the parallel context build_context set
              "mindspore_stage": _get_global_rank() // _get_stage_device_num()}
    Path(out, f"rank_{run.rank}.json").write_text(json.dumps(result, indent=1))
    return 0


def _wrapping(cell) -> list[dict]:
    """The cells the Trainer wrapped around the model, outermost first, with their micro-batch counts."""
    chain = []
    while cell is not None and len(chain) < 12:
        chain.append({"type": type(cell).__name__, "micro_size": getattr(cell, "micro_size", None)})
        cell = getattr(cell, "network", None) or getattr(cell, "_backbone", None)
    return chain


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
