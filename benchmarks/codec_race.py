"""(d5) What the codec costs a training step: int8 on every MLP linear against recompute, by the race's paired clock.

On `benchmarks/llama_medium.yaml` (8 layers, hidden 512, seq 512, batch 2, float32), each race trains its plans
in one process, step by step in turn (`python -m mf_memopt.auto.race_child`, 40 steps, the first 5 untimed), and a
plan's time is the median over the steps of its step over the first plan's ("keep everything") step of the same
batch (`auto.race.paired_ratio`). A race holds every plan at once, so it takes at most four.

* race "fused" (the codec's default on CPU): keep everything; `select_recompute: {feed_forward: True}`; int8 on
  `feed_forward\\.(w1|w2|w3)`; int4 on every linear;
* race "reference" (`MF_MEMOPT_CODEC=reference` in the race's process): keep; the same recompute; int8 on the MLP.

Each race prints the codec its child chose (`compress.choice.choose_codec` under the child's environment),
every plan's median step and its paired ratios against keep and against the recompute plan, and the load
average before and after.

    python -m benchmarks.codec_race [--steps 40] [--races fused reference] [--out benchmarks/data/codec_race.txt]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from benchmarks.common import teed

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "benchmarks" / "llama_medium.yaml"
NO_RECOMPUTE = {"recompute": False, "select_recompute": False, "select_comm_recompute": False}
MLP, ATTENTION = r"feed_forward\.(w1|w2|w3)", r"attention\.(wq|wk|wv|wo)"
PLANS = {
    "keep everything": {"recompute_config": NO_RECOMPUTE},
    "select_recompute feed_forward": {"recompute_config": {**NO_RECOMPUTE, "select_recompute": {"feed_forward": True}}},
    "int8 on the MLP": {"recompute_config": NO_RECOMPUTE, "compress_config": {"compress": True, "op_compress": [
        {"op_name": MLP, "method": "int8", "layers": True}]}},
    "int4 on every linear": {"recompute_config": NO_RECOMPUTE, "compress_config": {"compress": True, "op_compress": [
        {"op_name": pattern, "method": "int4", "layers": True} for pattern in (ATTENTION, MLP)]}},
}
RACES = {"fused": ("auto", list(PLANS)), "reference": ("reference", list(PLANS)[:3])}


def write_plans(names: list[str], work: Path) -> list[Path]:
    base = yaml.safe_load(CONFIG.read_text())
    paths = []
    for index, name in enumerate(names):
        document = copy.deepcopy(base)
        document.pop("compress_config", None)
        document.update(copy.deepcopy(PLANS[name]))
        path = work / f"plan{index}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        paths.append(path)
    return paths


def run_race(race: str, steps: int, root: Path) -> None:
    from mf_memopt.auto.race import paired_ratio, step_times
    from mf_memopt.compress.choice import choose_codec
    from mf_memopt.runs.runner import race_child

    codec, names = RACES[race]
    work = root / race
    work.mkdir(parents=True)
    configs = write_plans(names, work)
    previous = os.environ.get("MF_MEMOPT_CODEC")
    os.environ["MF_MEMOPT_CODEC"] = codec
    try:
        print(f"race {race} (MF_MEMOPT_CODEC={codec}), {steps} steps; before: {_load()}", flush=True)
        done = race_child(configs, work=work, steps=steps)
        print(f"after: {_load()}")
        # the race's child does not print mf_memopt's INFO log: the choice it made, under the same environment
        print(f"  codec: {choose_codec('CPU').line()}")
    finally:
        if previous is None:
            os.environ.pop("MF_MEMOPT_CODEC")
        else:
            os.environ["MF_MEMOPT_CODEC"] = previous
    times = step_times(done.log, len(names))
    for name, seconds in zip(names, times):
        print(f"  {name}: median step {statistics.median(seconds) * 1e3:.0f} ms over {len(seconds)} timed steps; "
              f"vs keep {paired_ratio(seconds, times[0]):.3f}, vs select_recompute feed_forward "
              f"{paired_ratio(seconds, times[1]):.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--races", nargs="+", choices=sorted(RACES), default=["fused", "reference"])
    parser.add_argument("--out", type=Path, help="also write everything printed to this file")
    args = parser.parse_args(argv)
    with teed() as printed, tempfile.TemporaryDirectory(prefix="mf_memopt_codec_race_") as tmp:
        print(f"command: python -m benchmarks.codec_race {' '.join(argv if argv is not None else sys.argv[1:])}")
        for race in args.races:
            run_race(race, args.steps, Path(tmp))
    if args.out:
        args.out.write_text(printed.getvalue())
    return 0


def _load() -> str:
    return "load average " + ", ".join(f"{value:.2f}" for value in os.getloadavg())


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
