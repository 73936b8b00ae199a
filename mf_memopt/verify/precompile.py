"""`python -m mf_memopt.verify.precompile CONFIG REPORT`: compile the training step once, without running it.

Run by `verify` with MS_DEV_PRECOMPILE_ONLY=1 and IR dumping on: it prepares the model exactly
as the launcher does, applies the plan, and hands it to MindFormers' Trainer with the same
optimizer, lr schedule and wrapper as a training run; MindSpore compiles the first step and
returns None. The apply report goes to REPORT; MindFormers' logs and a generated token file
go to a directory beside it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..runtime.environment import configure_logging, point_mindformers_at


def main(argv: list[str]) -> int:
    config, report = argv
    scratch = Path(report).resolve().parent / "mindformers"
    point_mindformers_at(scratch)

    from ..config.source import load_source
    from ..runtime.data import GENERATED
    from ..runtime.quiet import quiet_mindformers
    from ..runtime.session import Overrides, prepare
    from ..runtime.train import train

    configure_logging()
    quiet_mindformers()
    source = load_source(config)
    dataset = str(scratch / "tokens.mindrecord") if source.has(GENERATED) else None
    overrides = Overrides(use_parallel=False, output_dir=str(scratch), train_dataset_dir=dataset)
    session = prepare(config, overrides=overrides)
    Path(report).write_text(session.report.to_json() + "\n")
    train(session.network, session.config, device_target=session.run.device_target, compile_only=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
