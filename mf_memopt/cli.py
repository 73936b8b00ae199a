"""`python -m mf_memopt` and the console script `mf-memopt`: the commands."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from .config.load import Document, load_document, load_plan
from .config.plan import Plan
from .config.render import formative_lines, layer_table, summary
from .document.errors import ConfigError
from .estimate.transfer import DEFAULT_HOST_GBPS, DEFAULT_TFLOPS
from .runtime.child import Stopped
from .runtime.errors import LaunchError

SCRIPT = "mf-memopt"                # the console script (pyproject.toml, [project.scripts])
MODULE = "python -m mf_memopt"
SIZE_HELP = ("GB, MB and KB are 2**30, 2**20 and 2**10 bytes, as MindSpore reads the YAML's max_device_memory, "
             "the same as GiB, MiB and KiB")
WRITTEN_FILES = ("output", "png")   # options naming a file a command writes after its work, checked before it


def main(argv: Sequence[str] | None = None) -> int:
    program = invoked_as()
    args = _parser(program).parse_args(argv)
    where = f"{program} {args.command}"
    problem = _argument_problem(args)
    if problem:
        print(f"{args.command}: {problem}", file=sys.stderr)
        return 2
    try:
        status = args.run(args)
        sys.stdout.flush()              # a reader that has gone (`| head`) is seen here, not at exit
        return status
    except BrokenPipeError:
        _discard_stdout()
        return 128 + signal.SIGPIPE     # the status a shell shows for a process ended by SIGPIPE
    except ConfigError as error:
        print(error.render(), file=sys.stderr)
        return 1
    except LaunchError as error:
        print(f"{where}: {error}", file=sys.stderr)
        return 1
    except Stopped as stop:
        print(f"{where}: {stop}; its child process was ended and its temporary files removed", file=sys.stderr)
        return stop.exit_status


def invoked_as() -> str:
    """The program as the user started it: the console script's name, else `python -m mf_memopt` (also when a
    caller in this process runs `main`)."""
    return SCRIPT if Path(sys.argv[0] if sys.argv else "").name == SCRIPT else MODULE


def _discard_stdout() -> None:
    """What is still buffered for a reader that has gone goes nowhere, so that exiting does not fail on it."""
    with contextlib.suppress(OSError, ValueError):      # ValueError: a stdout without a file descriptor
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _argument_problem(args: argparse.Namespace) -> str | None:
    """Sizes read into bytes and the files a command writes checked, before any work: one line, or None."""
    for name in ("device_memory", "host_memory"):
        text = getattr(args, name, None)
        if text is not None:
            from .estimate.report import parse_size

            try:
                setattr(args, name, parse_size(text))
            except ValueError as error:
                return f"--{name.replace('_', '-')}: {error}"
    for name in WRITTEN_FILES:
        path = getattr(args, name, None)
        problem = _unwritable(Path(path)) if path is not None else None
        if problem:
            return f"--{name}: {problem}"
    return None


def _unwritable(path: Path) -> str | None:
    """Why a file cannot be written at `path`, or None."""
    folder = path.parent
    if path.is_dir():
        return f"{path} is a directory"
    if not folder.is_dir():
        return f"cannot write {path}: " + (f"{folder} is not a directory" if folder.exists() else
                                           f"no directory {folder}")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return f"cannot write {path}: permission denied"
    return None


def _parser(program: str = MODULE) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=program, description="Validate and explain recompute_config / swap_config.")
    parser.set_defaults(program=program)
    commands = parser.add_subparsers(required=True, metavar="COMMAND", dest="command")
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
    estimate.add_argument("--device-memory", metavar="SIZE",
                          help=f"device memory per card, e.g. 58GB; {SIZE_HELP} (default: the YAML's "
                               "context.max_device_memory, or MindFormers' 58GB without it)")
    estimate.add_argument("--tflops", type=_positive, default=DEFAULT_TFLOPS,
                          help=f"sustained fp16/bf16 TFLOPS of one device (default {DEFAULT_TFLOPS:g})")
    estimate.add_argument("--host-bandwidth", type=_positive, default=DEFAULT_HOST_GBPS,
                          help=f"device<->host GB/s (10**9 bytes/s) per direction (default {DEFAULT_HOST_GBPS:g})")
    estimate.add_argument("--codec-gbps", type=_codec_rates, default=(), metavar="RATES", help=CODEC_HELP)
    estimate.add_argument("--runtime", choices=("ascend", "cpu"), default=None,
                          help="ascend: device memory of an Ascend run; cpu: the MindSpore memory-pool peak of this "
                               "project's CPU launcher (default ascend; with --measure, the config's "
                               "context.device_target, where it trains: given, it must name that device)")
    estimate.add_argument("--measure", action="store_true",
                          help="also train the config with the launcher in a child process and print predicted "
                               "against measured peak per stage (CPU: memory-pool peak; Ascend: MindSpore's memory "
                               "statistics)")
    estimate.add_argument("--steps", type=_positive_int, default=1, help="training steps for --measure (default 1)")
    estimate.add_argument("--exact", action="store_true",
                          help="with --measure on CPU: replay MindSpore's allocation log for the pool peak to the "
                               "byte instead of the printed whole MiB (the run is 2-3 times slower)")
    estimate.set_defaults(run=_estimate)
    _auto_parser(commands)
    _compare_parser(commands)
    data = commands.add_parser("check-data", help="read every record of the YAML's MindRecord dataset in a child "
                                                  "process and name the file and record where it is damaged")
    data.add_argument("config", help="MindFormers training YAML (train_dataset.data_loader.dataset_dir)")
    data.set_defaults(run=_check_data)
    return parser


def _auto_parser(commands) -> None:
    auto = commands.add_parser("auto", help="choose recompute and swap per layer and stage under a device-memory "
                                            "budget, and write the YAML")
    auto.add_argument("config", help="MindFormers training YAML")
    auto.add_argument("--device-memory", metavar="SIZE",
                      help=f"budget per pipeline stage, e.g. 58GB or 300MB; {SIZE_HELP} (default with ascend: "
                           "the YAML's context.max_device_memory, or MindFormers' 58GB without it; cpu runtime: the "
                           "memory-pool peak, required)")
    auto.add_argument("--runtime", choices=("ascend", "cpu"), default="ascend",
                      help="ascend: device memory of an Ascend run (swap possible); cpu: the memory-pool peak of "
                           "this project's CPU launcher (recompute only: nothing is swapped on CPU)")
    auto.add_argument("--host-memory", metavar="SIZE", help="host memory per stage for swapped activations, a size "
                                                            "as --device-memory (default: unlimited)")
    auto.add_argument("--tflops", type=_positive, default=DEFAULT_TFLOPS,
                      help=f"sustained fp16/bf16 TFLOPS of one device (default {DEFAULT_TFLOPS:g})")
    auto.add_argument("--host-bandwidth", type=_positive, default=DEFAULT_HOST_GBPS,
                      help=f"device<->host GB/s (10**9 bytes/s) per direction (default {DEFAULT_HOST_GBPS:g})")
    auto.add_argument("--codec-gbps", type=_codec_rates, default=(), metavar="RATES",
                      help=CODEC_HELP + "; with it --compress works on --runtime ascend and with --balance")
    auto.add_argument("--margin", type=_percent, metavar="PERCENT",
                      help="hold predicted peaks this many percent under the budget (default: 5 with --runtime cpu, "
                           "the estimator's worst held-out under-estimate rounded up; 0 with ascend or --measure)")
    auto.add_argument("--balance", action="store_true",
                      help="choose the pipeline layout too: the offsets (per stage and chunk) with per-stage recompute "
                           "and swap, for the least predicted step time with every stage within the budget "
                           "(ascend runtime)")
    auto.add_argument("--output", "-o", help="write the planned YAML here")
    auto.add_argument("--json", action="store_true", help="print the result as JSON (bytes, seconds)")
    auto.add_argument("--measure", action="store_true",
                      help="cpu runtime: train 1 step of the plan, read the pool peak, and if it is over the budget "
                           "plan again for its predicted peak minus the excess (at most 3 rounds)")
    auto.add_argument("--profile", action="store_true",
                      help="cpu: price recompute by a measured step-time profile of this model shape (each choice "
                           "given to every layer, raced in one process; cached); --measure implies it. Without it a "
                           "cached profile is used, else the FLOP model")
    auto.add_argument("--compress", metavar="METHODS",
                      help="the methods a layer's MLP inputs may be kept compressed with, comma-separated (int8, "
                           "int4, int2, lossless), or none; each priced by the cpu runtime's measured profile or by "
                           "its --codec-gbps figure (default: those of int8,lossless something prices; the plan "
                           "writes compress_config)")
    auto.add_argument("--timing-runs", type=_positive_int, default=1, metavar="N",
                      help="cpu: races of the choices in a new time profile, and of the plans in --measure's time "
                           "loop; a time is the median over them (default 1)")
    auto.add_argument("--rivals", type=int, default=3, metavar="N",
                      help="with --measure: also measure the peaks of the N next-fastest plans the estimate calls "
                           "feasible, race those holding the budget against the plan in one process, and keep the "
                           "fastest (default 3; 0 keeps the search's plan)")
    auto.set_defaults(run=_auto)
def _compare_parser(commands) -> None:
    from .compare import DEFAULT_TOLERANCE

    compare = commands.add_parser("compare", help="train a base and a candidate config that differ only in their "
                                                  "memory plan, and say whether the candidate changes the training")
    compare.add_argument("base", help="the base training YAML")
    compare.add_argument("candidate", help="the same YAML with another recompute_config / swap_config / "
                                           "compress_config")
    compare.add_argument("--steps", type=_positive_int, default=8, help="training steps of each run (default 8)")
    compare.add_argument("--tolerance", type=_percent, metavar="PERCENT",
                         help="quantised compression: the largest relative loss difference allowed at any step "
                              f"(default {DEFAULT_TOLERANCE * 100:g})")
    compare.add_argument("--runtime", choices=("ascend", "cpu"), default=None,
                         help="where the runs train: the base's context.device_target (given, it must name that "
                              "device)")
    compare.add_argument("--no-bisect", action="store_true",
                         help="do not look for the quantised uses that cause a drift beyond the tolerance")
    compare.add_argument("--max-runs", type=_positive_int, default=8,
                         help="at most this many extra trainings when bisecting (default 8)")
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON")
    compare.add_argument("--png", help="write the loss curves and their difference to this PNG file")
    compare.set_defaults(run=_compare)


def _compare(args: argparse.Namespace) -> int:
    """0: equivalent; 1: not; 2: the configs cannot be compared (invalid, differ outside the plan, a run failed)."""
    from .compare import DEFAULT_TOLERANCE, RunFailed, compare_configs
    from .compare.report import comparison_text, write_chart

    tolerance = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
    try:
        result = compare_configs(args.base, args.candidate, steps=args.steps, runtime=args.runtime,
                                 tolerance=tolerance, bisect=not args.no_bisect, max_runs=args.max_runs,
                                 progress=lambda line: print(line, file=sys.stderr, flush=True))
    except ConfigError as error:
        print(error.render(), file=sys.stderr)
        return 2
    except RunFailed as error:
        print(f"{args.program} compare: {error}", file=sys.stderr)
        return 2
    if args.png:                        # before printing: a reader that stops early (`| head`) ends the printing
        write_chart(result, args.png)
    print(json.dumps(result.to_dict(), indent=2) if args.json else comparison_text(result))
    if args.png and not args.json:
        print(f"chart written to {args.png}")
    return 0 if result.equivalent() else 1


def _check_data(args: argparse.Namespace) -> int:
    from .runtime.datacheck import run_check_data

    return run_check_data(load_document(args.config).source)


CODEC_HELP = ("a compression method's compress + restore throughput measured on the device, in GB/s (10**9 bytes/s) of "
              "its full-precision input: METHOD=GBPS,... (int8, int4, int2, lossless) or one GBPS for every method; "
              "without a figure a method's codec costs no time in the estimate and --runtime ascend does not offer it")

def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _percent(text: str) -> float:
    """A percentage in [0, 100) as a share of 1."""
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage, got {text!r}") from None
    if not 0 <= value < 100:
        raise argparse.ArgumentTypeError(f"must be at least 0 and under 100, got {text}")
    return value / 100


def _codec_rates(text: str) -> tuple[tuple[str, float], ...]:
    """--codec-gbps: `int8=40,lossless=300` (each method once) or one figure for every method."""
    from .auto.choices import METHODS

    if "=" not in text:
        try:
            rate = _positive(text)
        except argparse.ArgumentTypeError as error:
            raise argparse.ArgumentTypeError(f"expected METHOD=GBPS,... or one GBPS for every method: {error}") \
                from None
        return tuple((method, rate) for method in METHODS)
    rates: dict[str, float] = {}
    for part in filter(None, (item.strip() for item in text.split(","))):
        method, _, value = part.partition("=")
        method = method.strip()
        if method not in METHODS:
            raise argparse.ArgumentTypeError(f"unknown method {method!r} in {text!r} (use {', '.join(METHODS)})")
        if method in rates:
            raise argparse.ArgumentTypeError(f"{method} is given twice in {text!r}")
        rates[method] = _positive(value.strip())
    return tuple(rates.items())


def _hardware(args: argparse.Namespace, device_memory: int | None):
    """The device figures the command line gives (`estimate.Hardware`)."""
    from .estimate import Hardware

    return Hardware(device_memory=device_memory, tflops=args.tflops, host_gbps=args.host_bandwidth,
                    codec_gbps=args.codec_gbps)


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
    for warning in (*plan.warnings, *plan.differences):
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
    from .verify.check import verify, verify_table

    result = verify(load_document(args.config), ir_dir=args.ir_dir)
    print(json.dumps(result.to_dict(), indent=2) if args.json else verify_table(result))
    if not result.agrees:
        return 1
    return 1 if args.strict and result.rule2 else 0


def _estimate(args: argparse.Namespace) -> int:
    from .estimate import estimate_config
    from .estimate.report import estimate_text, write_chart

    hardware = _hardware(args, args.device_memory)
    if args.exact and not args.measure:
        print("--exact refines --measure: add --measure", file=sys.stderr)
        return 2
    if args.measure:
        from .runs.check import measure_and_compare

        return measure_and_compare(args.config, runtime=args.runtime, hardware=hardware, steps=args.steps,
                                   as_json=args.json, exact=args.exact)
    result = estimate_config(load_document(args.config), runtime=args.runtime or "ascend", hardware=hardware)
    if args.png:                        # before printing: a reader that stops early (`| head`) ends the printing
        write_chart(result, args.png)
    print(json.dumps(result.to_dict(), indent=2) if args.json else estimate_text(result))
    if args.png and not args.json:
        print(f"chart written to {args.png}")
    return 0


def _auto(args: argparse.Namespace) -> int:
    from .auto.planner import compression_problem
    from .runs.measure import MeasureError

    problem = _auto_problem(args)
    if problem:
        print(f"auto: {problem}", file=sys.stderr)
        return 2
    budget = args.device_memory                     # bytes (`_argument_problem`), or None: the YAML's
    host = args.host_memory if args.host_memory is not None else float("inf")
    output = Path(args.output) if args.output else None
    margin = args.margin if args.margin is not None else (0.0 if args.measure else None)
    compress = _methods(args.compress)
    problem = compression_problem(compress, args.runtime, None, _hardware(args, budget), profile_pending=True)
    if problem:
        print(f"auto: --compress: {problem}", file=sys.stderr)
        return 2
    if args.balance:
        return _auto_balance(args, budget, host, margin, output, compress)
    document = load_document(args.config)           # the one reading of the config for this command
    try:
        times = _time_profile(args, document, compress)
    except MeasureError as error:
        print(f"auto --profile: {error}", file=sys.stderr)
        return 1
    problem = compression_problem(compress, args.runtime, times, _hardware(args, budget))
    if problem:
        print(f"auto: --compress: {problem}", file=sys.stderr)
        return 2
    return _auto_plan(args, document, budget, host, margin, output, times, compress)


def _auto_problem(args: argparse.Namespace) -> str | None:
    """What `auto`'s options ask that it cannot do, in one line; None when nothing."""
    if args.device_memory is None and args.runtime == "cpu":
        return ("--runtime cpu needs --device-memory (the memory-pool budget; the YAML's max_device_memory is an "
                "Ascend key)")
    if args.balance and (args.runtime != "ascend" or args.measure):
        return ("--balance plans pipeline stages, which the ascend runtime models: use it without --runtime cpu and "
                "--measure")
    if args.measure and args.runtime != "cpu":
        return "--measure trains the plan on this machine's CPU launcher: use it with --runtime cpu"
    if args.profile and args.runtime != "cpu":
        return "--profile measures step times with this machine's CPU launcher: use it with --runtime cpu"
    if args.rivals < 0:
        return f"--rivals must be 0 or more, got {args.rivals}"
    return None


def _time_profile(args: argparse.Namespace, document: Document, compress: tuple[str, ...] | None):
    """cpu: the cached step-time profile of this model shape, or a new one with --profile or --measure; else None."""
    if args.runtime != "cpu":
        return None
    from .auto.planner import DEFAULT_COMPRESS
    from .auto.space import cached_or_profiled

    return cached_or_profiled(document, measure=args.profile or args.measure, runs=args.timing_runs,
                              report=lambda line: print(line, file=sys.stderr),
                              compress=DEFAULT_COMPRESS if compress is None else compress)


def _auto_plan(args: argparse.Namespace, document: Document, budget: int | None, host: float, margin: float | None,
               output: Path | None, times, compress: tuple[str, ...] | None) -> int:
    """Plan (with --measure: plan, train and race), then print the plan and write the YAML."""
    from .auto import InfeasibleBudget, auto_plan
    from .auto.limits import PlannerMismatch
    from .auto.measure import TightenedInfeasible, holds
    from .auto.milp import SolverError
    from .auto.report import auto_output_json, auto_output_text, infeasible_json, infeasible_text, tightened_json
    from .runs.measure import MeasureError

    def plan_for(target: int):
        return auto_plan(document, budget=target, runtime=args.runtime, host_budget=host,
                         hardware=_hardware(args, target),
                         output_name=str(output or args.config), margin=margin, times=times, compress=compress)

    rounds, timed = None, None
    try:
        if args.measure:
            rounds, result, timed = _measure(args, document, plan_for, budget, output, times)
        else:
            result = plan_for(budget)
    except MeasureError as error:
        print(f"auto --measure: {error}", file=sys.stderr)
        return 1
    except TightenedInfeasible as error:
        print(f"auto --measure: {error}", file=sys.stderr)
        if args.json:
            print(json.dumps(tightened_json(error), indent=2))
        return 1
    except InfeasibleBudget as error:
        print(infeasible_text(error), file=sys.stderr)
        if args.json:
            print(json.dumps(infeasible_json(error), indent=2))
        return 1
    except (SolverError, PlannerMismatch) as error:
        print(f"auto: {error}", file=sys.stderr)
        return 1
    if output and (not args.measure or timed):
        output.write_text(result.text, encoding="utf-8")
    if args.json:
        print(json.dumps(auto_output_json(result, output, rounds, timed), indent=2))
    else:
        print(auto_output_text(result, output, budget, rounds, timed))
    if args.measure and not timed and not holds(rounds[-1].measured, budget):
        print(f"auto: still over the budget after {len(rounds)} rounds", file=sys.stderr)
        return 1
    return 0


def _measure(args: argparse.Namespace, document, plan_for, budget: int, output, times):
    """--measure: the peak rounds, then the time loop (the plan and its nearest rivals raced in one process)."""
    from .auto.measure import measure_plan

    hardware = _hardware(args, budget)
    rounds, plan, timed = measure_plan(document, plan_for, budget, times, rivals=args.rivals, hardware=hardware,
                                       runs=args.timing_runs, report=lambda line: print(line, file=sys.stderr))
    if output and not timed:
        output.write_text(plan.text, encoding="utf-8")
    return rounds, plan, timed


def _auto_balance(args: argparse.Namespace, budget: int, host: float, margin: float | None, output,
                  compress: tuple[str, ...] | None) -> int:
    from .auto import InfeasibleBudget
    from .auto.balance import balance_plan
    from .auto.balance_report import balance_infeasible_text, balance_json, balance_text
    from .auto.milp import SolverError
    from .auto.offsets_writer import WriterError
    from .auto.report import infeasible_json

    try:
        result = balance_plan(args.config, budget=budget, host_budget=host, margin=margin,
                              hardware=_hardware(args, budget), output_name=str(output or args.config),
                              compress=compress)
    except InfeasibleBudget as error:
        print(balance_infeasible_text(error), file=sys.stderr)
        if args.json:
            print(json.dumps(infeasible_json(error), indent=2))
        return 1
    except (SolverError, WriterError) as error:
        print(f"auto --balance: {error}", file=sys.stderr)
        return 1
    if output:
        output.write_text(result.text, encoding="utf-8")
    if args.json:
        print(json.dumps({**balance_json(result), "output": str(output) if output else None}, indent=2))
    else:
        print(balance_text(result))
        print(f"written to {output}" if output else "(no --output: the YAML was not written)")
    return 0


def _methods(text: str | None) -> tuple[str, ...] | None:
    """--compress: None when not given, () for `none`, else the methods named (checked by `auto_plan`)."""
    if text is None:
        return None
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    return () if names == ("none",) else names

