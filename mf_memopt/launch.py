"""`run_mindformer_memopt.py`: validate the YAML, build the model, apply the plan, train.

Same habits as MindFormers' run_mindformer.py (`--config`, `--run_mode train`,
`--use_parallel True`, `--output_dir`). Training uses generated tokens, so nothing is
downloaded; the apply report is written as JSON next to the logs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from statistics import mean
from typing import Any

from .apply import apply_plan
from .config import plan_source
from .context import lazy_inline_policy, setup_context
from .errors import ConfigError
from .logs import LOGGER, configure_logging
from .model import build_model, read_config
from .source import load_source
from .train import batches, build_optimizer, synthetic_tokens, train

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
        for issue in error.issues:
            print(issue.render(), file=sys.stderr)
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
    source = load_source(args.config)
    plan = plan_source(source, strict=args.strict)
    config = read_config(args.config)
    if plan.layout.stages > 1:
        raise SystemExit(f"{args.config}: pipeline_stage is {plan.layout.stages}; this launcher trains with data "
                         "parallelism only (plan pipeline configs with `python -m mf_memopt plan`)")
    use_parallel = bool(source.get(("use_parallel",), False)) if args.use_parallel is None else args.use_parallel
    workers = int(os.environ.get("MS_WORKER_NUM", "1"))
    if workers > 1 and not use_parallel:
        LOGGER.warning(f"{workers} workers train the same model independently because use_parallel is False; "
                       "pass --use_parallel True for data-parallel training")
    # The YAML as written: MindFormerConfig adds template defaults (max_device_memory, ...).
    run = setup_context(source.get(("context",)), use_parallel=use_parallel)
    lazy_inline_policy(plan.swap, plan.layout.stages, run.device_target)
    model_config = config.model.model_config
    built = build_model(config, device_target=run.device_target)
    report = apply_plan(plan, built.network, device_target=run.device_target)
    output = Path(args.output_dir or config.output_dir or "output")
    output.mkdir(parents=True, exist_ok=True)
    report_path = output / (f"apply_report_rank{run.rank}.json" if run.world_size > 1 else "apply_report.json")
    report_path.write_text(report.to_json() + "\n")
    LOGGER.info(f"apply report written to {report_path}")
    samples = _samples(config, model_config)
    optimizer = build_optimizer(config.optimizer, built.network.trainable_params())
    steps = args.train_steps or DEFAULT_STEPS
    records = train(built.network, optimizer, batches(samples, model_config.batch_size, run.rank, run.world_size),
                    steps)
    later = [record.milliseconds for record in records[1:]] or [records[0].milliseconds]
    LOGGER.info(f"training finished: {steps} steps, loss {records[0].loss:.4f} -> {records[-1].loss:.4f}, "
                f"mean step time after the first {mean(later):.1f} ms")
    return 0


def _samples(config: Any, model_config: Any):
    loader = (config.train_dataset or {}).get("data_loader") or {}
    if loader.get("type") != "SyntheticTokenDataset":
        LOGGER.warning(f"train_dataset ({loader.get('type')}) is not read: the launcher trains on generated tokens")
    count = int(loader.get("num_samples", 32))
    return synthetic_tokens(count, model_config.seq_length, model_config.vocab_size, int(loader.get("seed", 0)))
