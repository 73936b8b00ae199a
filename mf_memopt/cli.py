"""`python -m mf_memopt`: the config pipeline without training."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from .config import load_plan
from .errors import ConfigError
from .plan import Plan
from .render import formative_lines, layer_table, summary


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except ConfigError as error:
        for issue in error.issues:
            print(issue.render(), file=sys.stderr)
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
    return parser


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
