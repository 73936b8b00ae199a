"""`run_mindformer_memopt.py`: MindFormers' run_mindformer.py with mf_memopt's plan in place of LayerSetting.

check the output directory -> validate the YAML and its training sections -> set the context
(MindFormers' build_context) -> build the model with MindFormers' recompute/swap off -> apply
the plan -> train with MindFormers' Trainer (dataset, optimizer, lr schedule, wrapper,
callbacks, checkpoints, resume) on that model.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..apply.logs import LOGGER
from ..config.load import Document, load_document
from ..config.plan import Plan
from ..document.errors import ConfigError
from . import interrupt
from .claim import Claim, check_room, claim_output_dir
from .datacheck import dataset_files
from .environment import configure_logging, msrun_workers, point_mindformers_at, process_role, rank
from .errors import LaunchError
from .failures import RunFacts, translate
from .outputs import check_output_dir, report_name, worker_output, write_report, written_files
from .quiet import quiet_mindformers
from .record import checkpoint_bytes, checkpoints_kept, record_name, run_record
from .supervise import report, supervise, supervised
from .train import Progress


@dataclass
class _State:
    """Where the run is, for the one line printed when it is interrupted."""

    phase: str = "checking the config"
    output: Path | None = None
    rank: int = 0
    progress: Progress = field(default_factory=Progress)


PREFIX = "run_mindformer_memopt.py"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.run_mode != "train":
        print(f"{PREFIX}: --run_mode {args.run_mode} is not supported: this launcher trains "
              "(--run_mode train); to check or explain a config without training use "
              f"`python -m mf_memopt plan {args.config}`", file=sys.stderr)
        return 2
    if args.preflight:
        return _preflight_only(args)
    if not supervised():
        return supervise(argv, PREFIX)
    # A log handler that cannot write (a full disk) must not print its own traceback for every line: the run
    # stops in one line that says why (failures.py).
    logging.raiseExceptions = False
    configure_logging()
    state = _State()
    interrupt.install()
    try:
        return _run(args, state)
    except (ConfigError, LaunchError) as error:
        return _refused(error)
    except KeyboardInterrupt:
        print(_interrupted_line(state), file=sys.stderr, flush=True)
        interrupt.finish()
        return interrupt.INTERRUPTED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Train a MindFormers model with mf_memopt's recompute/swap plan.")
    parser.add_argument("--config", required=True, help="MindFormers training YAML")
    parser.add_argument("--run_mode", default="train", help="only `train` is supported")
    parser.add_argument("--use_parallel", type=_flag, default=None,
                        help="True for parallel training under msrun (default: use_parallel of the YAML)")
    parser.add_argument("--output_dir", default=None, help="logs, checkpoints and the apply report (default: "
                                                           "output_dir of the YAML, else ./output)")
    parser.add_argument("--load_checkpoint", default=None, help="checkpoint file or directory to load")
    parser.add_argument("--resume_training", type=_flag_or_name, default=None,
                        help="True (or a checkpoint name) to resume from --load_checkpoint with its step, "
                             "optimizer state and data position")
    parser.add_argument("--train_dataset_dir", default=None, help="replaces train_dataset.data_loader.dataset_dir")
    parser.add_argument("--register_path", default=None, help="directory of a package registering custom classes")
    parser.add_argument("--device_id", type=int, default=None, help="replaces context.device_id")
    parser.add_argument("--seed", type=int, default=None, help="replaces seed")
    parser.add_argument("--epochs", type=int, default=None, help="replaces runner_config.epochs")
    parser.add_argument("--train_steps", type=int, default=None,
                        help="stop after this many steps of this run (default: the dataset's steps times the "
                             "epochs, less those a resumed run has done)")
    parser.add_argument("--record_steps", default=None, metavar="FILE",
                        help="rank 0 writes each step's loss, global norm, overflow and loss scale (exact float32 "
                             "values) as JSON lines to FILE, then a digest of the trained parameters (what "
                             "`python -m mf_memopt compare` reads)")
    parser.add_argument("--strict", action="store_true", help="refuse configs whose rules conflict")
    parser.add_argument("--force", action="store_true", help="replace an existing apply report instead of keeping "
                                                             "it under a dated name")
    parser.add_argument("--preflight", action="store_true",
                        help="only check what is checked before anything is written (the YAML, its plan, the device, "
                             "pipeline parallelism on it) and exit; scripts/msrun_launcher.sh runs this before msrun")
    return parser


def _preflight_only(args: argparse.Namespace) -> int:
    """The checks of `_run` before the output directory, in this process; 0 when the run may start."""
    from .session import Overrides, preflight

    try:
        preflight(load_document(args.config), strict=args.strict,
                  overrides=Overrides(use_parallel=args.use_parallel))
    except (ConfigError, LaunchError) as error:
        return _refused(error)
    return 0


def _refused(error: ConfigError | LaunchError) -> int:
    """A run that cannot start or go on: its reason on stderr, exit status 1."""
    print(error.render() if isinstance(error, ConfigError) else f"{PREFIX}: {error}", file=sys.stderr)
    return 1


def _flag(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {text}")


def _flag_or_name(text: str) -> bool | str:
    try:
        return _flag(text)
    except argparse.ArgumentTypeError:
        return text


def _run(args: argparse.Namespace, state: _State) -> int:
    from .session import Overrides, preflight, use_parallel_of

    document = load_document(args.config)       # the one reading of the config for this run
    # the device and pipeline parallelism are settled before anything is written (runtime/device.py)
    plan = preflight(document, strict=args.strict, overrides=Overrides(use_parallel=args.use_parallel))
    source = document.source
    written = Path(args.output_dir or source.get(("output_dir",)) or "output")
    state.output = check_output_dir(worker_output(written, use_parallel=use_parallel_of(source, args.use_parallel)))
    claim = claim_output_dir(state.output, process_role())
    try:
        return _claimed(args, state, document, plan, claim)
    finally:
        claim.release()


def _claimed(args: argparse.Namespace, state: _State, document: Document, plan: Plan, claim: Claim) -> int:
    facts = RunFacts(output=state.output, datasets=dataset_files(document.source, args.train_dataset_dir))
    report(output=str(state.output), rank=int(rank()), workers=msrun_workers(), datasets=facts.datasets)
    try:
        return _train(args, state, document, plan, claim)
    except (ConfigError, LaunchError, KeyboardInterrupt):
        raise
    except Exception as error:
        facts.step, facts.rank = state.progress.step, state.rank
        translated = translate(error, facts)
        if translated is None:
            raise
        raise translated from None


def _train(args: argparse.Namespace, state: _State, document: Document, plan: Plan, claim: Claim) -> int:
    from .session import Overrides, assemble, check

    if claim.taken_over:
        LOGGER.warning(f"took over output directory {state.output} from a run that ended without releasing it "
                       f"({claim.taken_over})")
    LOGGER.info(check_room(state.output, checkpoint_bytes(document), checkpoints_kept(document.source),
                           msrun_workers()))
    _mindformers_paths(state.output)
    if args.register_path:
        _register(args.register_path)
    overrides = Overrides(use_parallel=args.use_parallel, output_dir=str(state.output),
                          load_checkpoint=args.load_checkpoint, resume_training=args.resume_training,
                          train_dataset_dir=args.train_dataset_dir, device_id=args.device_id, seed=args.seed,
                          epochs=args.epochs)
    plan = check(document, strict=args.strict, overrides=overrides, plan=plan)
    state.phase = "building the model"
    session = assemble(document, plan, overrides)       # checked above: `prepare` would check again
    state.rank = session.run.rank
    state.phase = "starting MindFormers' Trainer (before the first step)"
    report_path = state.output / report_name(session.run.rank, session.run.world_size)
    LOGGER.info(write_report(report_path, session.report.to_json() + "\n", force=args.force))
    record = state.output / record_name(session.run.rank, session.run.world_size)
    LOGGER.info(write_report(record, run_record(document.source), force=args.force,
                             what="the config this run trains"))
    from .train import train

    record = _step_record(args.record_steps, session.run.rank)
    progress = train(session.network, session.config, device_target=session.run.device_target,
                     steps=args.train_steps, progress=state.progress, record=record)
    LOGGER.info(_finished_line(progress, state.output, session.run.rank))
    return 0


def _step_record(path: str | None, rank: int) -> Path | None:
    """The step record of rank 0, started empty; None when not asked for or on another rank."""
    if path is None or rank != 0:
        return None
    record = Path(path)
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text("")
    except OSError as error:
        raise LaunchError(f"--record_steps {path} cannot be written ({error.strerror or error})") from None
    return record


def _mindformers_paths(output: Path) -> None:
    point_mindformers_at(output)
    quiet_mindformers()


def _register(path: str) -> None:
    directory = Path(path).resolve()
    if not directory.is_dir():
        raise LaunchError(f"--register_path {path} is not a directory")
    sys.path.insert(0, str(directory.parent))
    importlib.import_module(directory.name)


def _finished_line(progress: Progress, output: Path, rank: int) -> str:
    losses = progress.losses
    trend = f", loss {losses[0]:.4f} -> {losses[-1]:.4f}" if losses else ""
    files = "; ".join(written_files(output, rank))
    return f"training finished after {progress.step} step(s) of this run{trend}; written: {files}"


def _interrupted_line(state: _State) -> str:
    where = (f"after {state.progress.step} step(s) of this run" if state.progress.step
             else f"while {state.phase}")
    files = written_files(state.output, state.rank) if state.output else []
    written = "; ".join(files) if files else "nothing"
    return f"{PREFIX}: interrupted {where}; written: {written}"


if __name__ == "__main__":          # the supervised child (runtime/supervise.py)
    sys.exit(main())
