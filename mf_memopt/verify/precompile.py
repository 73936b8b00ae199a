"""Compile the training step once, without running it (`python -m mf_memopt.verify.precompile_child CONFIG REPORT`).

Run by `verify` with MS_DEV_PRECOMPILE_ONLY=1 and IR dumping on: it prepares the model exactly
as the launcher does, applies the plan, and hands it to MindFormers' Trainer with the same
optimizer, lr schedule and wrapper as a training run; MindSpore compiles the first step and
returns None. The apply report goes to REPORT; MindFormers' logs and a generated token file
go to a directory beside it.

`precompile_child CONFIG REPORT_DIR --ranks` is one msrun worker of a pipeline config (`pipeline.py` starts them
under msrun): the launcher's distributed run (`--use_parallel True`: MindFormers' build_context, its
stage assignment and pipeline cell) up to the compile of this rank's stage. The worker saves its IR under
`$MS_DEV_SAVE_GRAPHS_PATH/rank_<r>` and its apply report as REPORT_DIR/rank_<r>.json.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.load import Document, load_document
from ..runtime.environment import configure_logging, point_mindformers_at, rank

if TYPE_CHECKING:
    from ..runtime.session import Overrides

COMPILE_ENV = {"MS_DEV_PRECOMPILE_ONLY": "1", "MS_DEV_SAVE_GRAPHS": "1", "MS_DEV_DUMP_IR_PASSES": "validate",
               "GLOG_v": "3"}
SAVE_GRAPHS_PATH = "MS_DEV_SAVE_GRAPHS_PATH"
RANKS = "--ranks"


def rank_outputs(report_dir: str | Path) -> Path:
    """This worker's report file; its IR goes to its own directory below the job's (set before MindSpore is
    imported, which reads the variable)."""
    own = f"rank_{rank()}"
    os.environ[SAVE_GRAPHS_PATH] = str(Path(os.environ.get(SAVE_GRAPHS_PATH, "ir"), own))
    return Path(report_dir, f"{own}.json")


def main(argv: list[str]) -> int:
    config, report, *mode = argv
    ranks = mode == [RANKS]
    report_path = rank_outputs(report) if ranks else Path(report)
    document = load_document(config)             # the one reading of the config in this worker
    overrides = overrides_for(document, report_path, ranks=ranks)

    from ..runtime.quiet import quiet_mindformers
    from ..runtime.session import prepare
    from ..runtime.train import train

    configure_logging()
    quiet_mindformers()
    session = prepare(document, overrides=overrides)
    report_path.write_text(session.report.to_json() + "\n")
    train(session.network, session.config, device_target=session.run.device_target, compile_only=True)
    return 0


def overrides_for(document: Document, report: Path, *, ranks: bool) -> Overrides:
    """The launcher's command-line values for this compile (`--use_parallel True` for a pipeline config's ranks);
    MindFormers' logs and a generated token file go to a directory beside the report (set before MindFormers
    is imported)."""
    scratch = report.resolve().parent / "mindformers"
    point_mindformers_at(scratch)

    from ..runtime.data import GENERATED
    from ..runtime.session import Overrides

    dataset = str(scratch / "tokens.mindrecord") if document.source.has(GENERATED) else None
    return Overrides(use_parallel=ranks, output_dir=str(scratch), train_dataset_dir=dataset)
