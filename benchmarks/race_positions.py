"""Does a plan's place in a race's order move its time? Copies of one plan raced in one process, in a fixed order and
in the order that rotates each step (`mf_memopt.auto.race`, the default since the rotation was added).

Six copies of one plan are identical: any spread between their paired ratios (`race.paired_ratio`, each copy's
steps over copy 0's steps of the same batch) is the race's own error. In a fixed order a copy always runs in the
same place (first, right after another, ...); rotated, every copy runs in every place equally often. The config is
the one the earlier copies were raced on (seed 20261128's Llama of `benchmarks/auto_bruteforce.py`, plan "0-1
recompute feed_forward+attention; 2 keep"); the races alternate fixed and rotated so that a slow stretch of the
machine falls on both.

    python benchmarks/race_positions.py [--races 2] [--copies 6] [--steps 40]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.auto_bruteforce import draw  # noqa: E402
from benchmarks.common import load_note, print_table  # noqa: E402

SEED = 20261128


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--races", type=int, default=2, help="races of each order")
    parser.add_argument("--copies", type=int, default=6)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    from mf_memopt.auto.choices import KEEP, Choice
    from mf_memopt.auto.race import lower_quartile, paired_ratio, race
    from mf_memopt.auto.space import PlanSpace
    from mf_memopt.auto.writer import Assignment

    print(load_note())
    rows, spreads = [], {"fixed": [], "rotated": []}
    with tempfile.TemporaryDirectory(prefix="mf_memopt_positions_") as tmp:
        work = Path(tmp)
        name, text = next((name, text) for name, text in draw(SEED).items() if name.startswith("llama"))
        config = work / f"{name}.yaml"
        config.write_text(text)
        space = PlanSpace(config)
        both = Choice(select=space.context.cells.select)
        plan = space.context.text_of(Assignment(choices=dict(zip(space.layers, (both, both, KEEP))), prefetch={}))
        copies = []
        for index in range(args.copies):
            copies.append(work / f"copy{index}.yaml")
            copies[-1].write_text(plan)
        for number in range(args.races):
            for order in ("fixed", "rotated"):
                os.environ.setdefault("GLOG_v", "3")
                steps = race(copies, work / f"race_{order}_{number}", steps=args.steps, rotate=order == "rotated")
                ratios = [paired_ratio(mine, steps[0]) for mine in steps]
                spreads[order].append(max(ratios) - min(ratios))
                rows.append([f"{order} {number + 1}", f"{lower_quartile(steps[0]) * 1e3:.1f}",
                             " ".join(f"{ratio:.3f}" for ratio in ratios), f"{min(ratios):.3f}-{max(ratios):.3f}",
                             f"{spreads[order][-1]:.3f}"])
    print_table(f"{args.copies} copies of one plan of {name} ({args.steps} steps, the first 5 untimed), each copy's "
                "time over copy 0's (paired), in a fixed order and rotated",
                ["race", "copy 0 (ms, lower quartile)", "copies 0..n over copy 0", "range", "spread"], rows)
    for order, values in spreads.items():
        print(f"{order}: spread between copies {', '.join(f'{value:.3f}' for value in values)} "
              f"(mean {sum(values) / len(values):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
