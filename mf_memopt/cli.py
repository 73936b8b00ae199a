"""`python -m mf_memopt`: the config pipeline without training."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from .config import load_plan
from .estimate.transfer import DEFAULT_HOST_GBPS, DEFAULT_TFLOPS
from .errors import ConfigError
from .plan import Plan
from .render import formative_lines, layer_table, summary


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except ConfigError as error:
        print(error.render(), file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mf_memopt",
                                     description="Validate and explain recompute_config / swap_config.")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    validate = commands.add_parser("validate", help="check the config; print a one-line summary")
    validate.set_defaults(run=_validate)
    plan = commands.add_parser("plan", help="print the normalised config and the per-layer plan")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(run=_plan)
    for command in (validate, plan):
        command.add_argument("config", help="MindFormers training YAML")
        command.add_argument("--strict", action="store_true",
                             help="treat conflicts between rules as errors instead of resolving them")
    check = commands.add_parser("verify", help="compile the training graph (without running it) and check that "
                                               "its recompute and offload marks are the plan's")
    check.add_argument("config", help="MindFormers training YAML (one the launcher can train)")
    check.add_argument("--json", action="store_true", help="print the result as JSON")
    check.add_argument("--ir-dir", help="keep the compiled IR in this directory")
    check.add_argument("--strict", action="store_true", help="also fail on rule-2 conflicts")
    check.set_defaults(run=_verify)
    estimate = commands.add_parser("estimate", help="estimate each pipeline stage's peak memory, what each layer "
                                                    "keeps, recomputes and swaps, and the swap traffic")
    estimate.add_argument("config", help="MindFormers training YAML")
    estimate.add_argument("--json", action="store_true", help="print the estimate as JSON (bytes, seconds)")
    estimate.add_argument("--png", help="write a chart to this PNG file")
    estimate.add_argument("--device-memory", default="64GiB", help="device memory per card (default 64GiB)")
    estimate.add_argument("--tflops", type=_positive, default=DEFAULT_TFLOPS,
                          help=f"sustained fp16/bf16 TFLOPS of one device (default {DEFAULT_TFLOPS:g})")
    estimate.add_argument("--host-bandwidth", type=_positive, default=DEFAULT_HOST_GBPS,
                          help=f"device<->host GB/s per direction (default {DEFAULT_HOST_GBPS:g})")
    estimate.add_argument("--runtime", choices=("ascend", "cpu"), default="ascend",
                          help="ascend: device memory of an Ascend run; cpu: the MindSpore memory-pool peak of this "
                               "project's CPU launcher (for calibration)")
    estimate.set_defaults(run=_estimate)
    return parser


def _positive(text: str) -> float:
    """A finite number > 0 (a throughput the estimate divides by)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def _print_warnings(plan: Plan) -> None:
    for warning in plan.warnings:
        print(warning.render(), file=sys.stderr)


def _validate(args: argparse.Namespace) -> int:
    plan = load_plan(args.config, strict=args.strict)
    _print_warnings(plan)
    print(summary(plan))
    return 0


def _plan(args: argparse.Namespace) -> int:
    plan = load_plan(args.config, strict=args.strict)
    _print_warnings(plan)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2, sort_keys=True))
        return 0
    print("\n".join(formative_lines(plan)))
    print()
    print(layer_table(plan))
    for conflict in plan.conflicts:
        print(f"conflict: {conflict.message()}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from .verify import verify, verify_table

    result = verify(args.config, ir_dir=args.ir_dir)
    print(json.dumps(result.to_dict(), indent=2) if args.json else verify_table(result))
    if not result.agrees:
        return 1
    return 1 if args.strict and result.rule2 else 0


def _estimate(args: argparse.Namespace) -> int:
    from .estimate import Hardware, estimate_config
    from .estimate.report import estimate_text, parse_size, write_chart

    try:
        memory = parse_size(args.device_memory)
    except ValueError as error:
        print(f"--device-memory: {error}", file=sys.stderr)
        return 2
    hardware = Hardware(device_memory=memory, tflops=args.tflops, host_gbps=args.host_bandwidth)
    result = estimate_config(args.config, runtime=args.runtime, hardware=hardware)
    print(json.dumps(result.to_dict(), indent=2) if args.json else estimate_text(result))
    if args.png:
        write_chart(result, args.png)
        if not args.json:
            print(f"chart written to {args.png}")
    return 0
