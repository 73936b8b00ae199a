"""`python -m mf_memopt.precompile CONFIG REPORT`: compile the training graph once, without running it.

Run by `verify` with MS_DEV_PRECOMPILE_ONLY=1 and IR dumping on: it builds the model
exactly as the launcher does, applies the plan, compiles one training step (which returns
None), and writes the apply report to REPORT.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import mindspore as ms
    from mindspore import nn

    from .logs import configure_logging
    from .session import prepare

    config, report = argv
    configure_logging()
    session = prepare(config, use_parallel=False)
    step = nn.TrainOneStepCell(session.network, session.optimizer())
    step.set_train(True)
    step(ms.Tensor(next(session.data())))
    Path(report).write_text(session.report.to_json() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
