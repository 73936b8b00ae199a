"""`run_mindformer_memopt.py`: validate the YAML, build the model, apply the plan, train.

Same habits as MindFormers' run_mindformer.py (`--config`, `--run_mode train`,
`--use_parallel True`, `--output_dir`). Training uses generated tokens, so nothing is
downloaded; the apply report is written as JSON next to the logs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from statistics import mean

from .errors import ConfigError
from .logs import LOGGER, configure_logging
from .session import prepare
from .train import train

DEFAULT_STEPS = 20


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging()
    if args.run_mode != "train":
        print(f"run_mindformer_memopt.py: --run_mode {args.run_mode} is not supported: this launcher trains "
              "(--run_mode train); to check or explain a config without training use "
              f"`python -m mf_memopt plan {args.config}`", file=sys.stderr)
        return 2
    try:
        return _run(args)
    except ConfigError as error:
        print(error.render(), file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Train a MindFormers model with mf_memopt's recompute/swap plan.")
    parser.add_argument("--config", required=True, help="MindFormers training YAML")
    parser.add_argument("--run_mode", default="train", help="only `train` is supported")
    parser.add_argument("--use_parallel", type=_flag, default=None,
                        help="True for data parallelism under msrun (default: use_parallel of the YAML)")
    parser.add_argument("--output_dir", default=None, help="where the apply report goes (default: output_dir of "
                                                           "the YAML, else ./output)")
    parser.add_argument("--train_steps", type=int, default=None, help=f"steps to train (default {DEFAULT_STEPS})")
    parser.add_argument("--strict", action="store_true", help="refuse configs whose rules conflict")
    return parser


def _flag(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {text}")


def _run(args: argparse.Namespace) -> int:
    session = prepare(args.config, strict=args.strict, use_parallel=args.use_parallel)
    output = Path(args.output_dir or session.config.output_dir or "output")
    output.mkdir(parents=True, exist_ok=True)
    name = f"apply_report_rank{session.run.rank}.json" if session.run.world_size > 1 else "apply_report.json"
    (output / name).write_text(session.report.to_json() + "\n")
    LOGGER.info(f"apply report written to {output / name}")
    steps = args.train_steps or DEFAULT_STEPS
    records = train(session.network, session.optimizer(), session.data(), steps)
    later = [record.milliseconds for record in records[1:]] or [records[0].milliseconds]
    LOGGER.info(f"training finished: {steps} steps, loss {records[0].loss:.4f} -> {records[-1].loss:.4f}, "
                f"mean step time after the first {mean(later):.1f} ms")
    return 0
