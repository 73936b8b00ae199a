"""Plans timed against each other in one process, one step of each in turn: the clock `auto` compares plans by.

Runs of one plan in separate processes differ by up to 37% on a 2-core CPU: a run can land in a slow stretch that
lasts longer than the run, and the plans `auto` chooses between differ by less than that. In one process that
trains every plan, step s of each plan in turn, a slow stretch slows them all alike. Plans are compared step by
step: a plan's time over another's is the median over the steps of its step over the other's step of the same batch
(`paired_ratio`). Each step of a race spreads by about 9% around that median on a 2-core CPU, so the median of 25
steps is good to about 1.5% (bootstrap, the brute-force benchmark's races of seven plans), and a plan's ratio moved
between two races by 0.5-1.4% (median). Copies of one plan in one race are not equal, though: six copies measured
0.970-1.037 of the first, so one race does not tell plans apart closer than about 5% (`measure.RESOLUTION`).

The child (`python -m mf_memopt.auto.race_child --steps N --work DIR CONFIG...`) prepares each config as the launcher
does (the checks, the context, the model built with MindFormers' own handling off and the plan applied) and lets
MindFormers' Trainer build the training cell of the YAML (its optimizer, wrapper and dataset), which it takes when
training begins, before the first step. Then every step fetches one batch and trains each plan on it, in an order
that rotates by one place each step (`rotated`), and prints `mf_memopt race: plan I step S wall_ms W`: the wall
time of that plan's step, its loss read back so the step has finished. The first `WARMUP` steps of each plan are
not timed (the compile, then the steps that run 30-50% slower while the process settles). The process's memory
pool holds every plan at once, so a race measures no peak: peaks come from a run of the plan alone
(`measure.train_peak`).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from ..runs.measure import MeasureError

STEPS = 40                  # steps of each plan in a race (35 timed: the median of 25 was good to about 1.5%)
WARMUP = 5                  # the first steps of each plan are not timed: the compile, then the process settling
PREFIX = "mf_memopt race:"
LINE = re.compile(r"mf_memopt race: plan (\d+) step (\d+) wall_ms ([\d.]+)")


def lower_quartile(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 4]


def paired_ratio(plan: Sequence[float], anchor: Sequence[float]) -> float:
    """A plan's step time over the anchor's in one race: the median over the steps of (its step s / the anchor's
    step s). Step s of every plan runs back to back on one batch, so a slow stretch slows both steps of a pair
    alike and leaves the ratio; a ratio of two lower quartiles is not paired and keeps it (on the brute-force
    benchmark's seed 20261127, a plan's ratio moved between two passes by 0.5%/1.4% paired, 4.2%/1.9% unpaired:
    median, mcore Qwen3/Llama)."""
    pairs = [mine / theirs for mine, theirs in zip(plan, anchor) if theirs > 0]
    if not pairs:
        raise ValueError("no step of the plan pairs with a step of the anchor")
    return statistics.median(pairs)


class RaceKilled(MeasureError):
    """A race's child was killed by SIGKILL (out of memory: a race holds every plan at once); fewer plans a race may
    fit."""


def race(configs: Sequence[Path], work: Path, steps: int = STEPS, timeout: float | None = 3600,
         rotate: bool = True) -> list[tuple[float, ...]]:
    """Race `configs` (YAML files) in one child process; each one's timed step seconds, in the order given. With
    `rotate` False every step runs them in the order given (`benchmarks/race_positions.py` measures the difference)."""
    from ..runs.runner import ChildFailed, ChildKilled, race_child

    work.mkdir(parents=True, exist_ok=True)
    try:
        done = race_child(list(configs), work=work, steps=steps, timeout=timeout, rotate=rotate)
    except ChildKilled as error:
        raise RaceKilled(str(error)) from error
    except ChildFailed as error:
        raise MeasureError(str(error)) from error
    return step_times(done.log, len(configs))


def step_times(log: str, plans: int, warmup: int = WARMUP) -> list[tuple[float, ...]]:
    """Each plan's step seconds after the first `warmup` steps, from the race's lines."""
    seconds: list[dict[int, float]] = [{} for _ in range(plans)]
    for plan, step, wall in LINE.findall(log):
        if int(plan) < plans:
            seconds[int(plan)][int(step)] = float(wall) / 1e3
    if not all(seconds):
        missing = [str(index) for index, steps in enumerate(seconds) if not steps]
        raise MeasureError(f"the race printed no step times for plan(s) {', '.join(missing)} (mf_memopt.auto.race)")
    return [tuple(value for step, value in sorted(steps.items()) if step > warmup)
            or tuple(value for _, value in sorted(steps.items())) for steps in seconds]


def rotated(plans: int, step: int) -> list[int]:
    """The order the plans run in at `step`: one place further round each step, so that every plan runs in every
    place of the order equally often (no plan always first, or always right after another)."""
    start = (step - 1) % plans
    return [*range(start, plans), *range(start)]


class _Taken(Exception):
    """Raised when training begins: the Trainer's training cell has been taken, no step is run."""


def _training_cell(document, work: Path, dataset: Path | None) -> tuple[object, object]:
    """The training cell MindFormers' Trainer builds for the config `document` (plan applied) and its dataset."""
    from mindformers import Trainer
    from mindspore.train.callback import Callback

    from ..runtime.session import Overrides, prepare
    from ..runtime.train import use_cpu_wrapper

    session = prepare(document, overrides=Overrides(
        output_dir=str(work), train_dataset_dir=str(dataset) if dataset else None, epochs=1))
    use_cpu_wrapper(session.config)
    _forget_registered_parameters()
    taken: dict[str, object] = {}

    class Take(Callback):
        def on_train_begin(self, run_context):
            args = run_context.original_args()
            taken["cell"], taken["dataset"] = args.train_network, args.train_dataset
            raise _Taken

    with contextlib.suppress(_Taken):
        Trainer(args=session.config, model=session.network, callbacks=[Take()]).train()
    if "cell" not in taken:
        raise RuntimeError(f"MindFormers' Trainer began no training for {document.source.file}")
    return taken["cell"], taken["dataset"]


def _forget_registered_parameters() -> None:
    """MindFormers' wrappers register their loss parameters (`indexer_loss`, ...) by name in one registry per
    process, and a second wrapper would find the name taken: each plan's wrapper registers its own."""
    from mindformers.utils.parameter_register import ParameterRegister

    if ParameterRegister._instance is not None:
        ParameterRegister._instance._params = {}


def _batches(dataset):
    """The dataset's batches, read again from the start as often as needed."""
    while True:
        yield from dataset.create_tuple_iterator(num_epochs=1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mf_memopt.auto.race_child", description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+", type=Path)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--fixed-order", action="store_true", help="run the plans in the order given every step")
    args = parser.parse_args(argv)
    from ..config.load import load_document
    from ..runs.runner import yaml_dataset

    cells = []
    for index, config in enumerate(args.configs):
        work = args.work / f"plan{index}"
        document = load_document(config)        # the one reading of each config in this child
        cells.append(_training_cell(document, work, yaml_dataset(document, work)))
    for cell, _ in cells:
        cell.set_train(True)
    batches = _batches(cells[0][1])       # the configs differ in their plan alone: one dataset feeds them all
    for step in range(1, args.steps + 1):
        batch = next(batches)
        for index in range(len(cells)) if args.fixed_order else rotated(len(cells), step):
            cell = cells[index][0]
            began = time.perf_counter()
            outputs = cell(*batch)
            loss = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
            loss.asnumpy()
            print(f"{PREFIX} plan {index} step {step} wall_ms {(time.perf_counter() - began) * 1e3:.2f}", flush=True)
    return 0
