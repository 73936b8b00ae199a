"""(d6) The memory/time frontier of recompute and compression, measured at three widths and drawn.

For each width (hidden 512, 1024 and 2048; `benchmarks/llama_medium.yaml` with the layers cut so that a race of
four plans fits this machine
and takes minutes; at 2048, two layers of batch 4), every plan below is

* run alone for one step by the launcher in a child process, for its memory-pool peak (`estimate --measure`);
* raced against "keep everything" in races of at most four plans (two at 2048) (`mf_memopt.auto.race`, the order rotating each
  step, the first 5 steps untimed), for its step time as the paired ratio to keep's (`auto.race.paired_ratio`).

Plans: keep everything; `select_recompute` of the attention and of the MLP; full recompute; int8, int4 and int2 on
the MLP's linears and on every linear; lossless (`compress_dense: level0`, the MLP's w2 input); and one mixed plan
(the attention recomputed, int8 on the MLP). A plan is on the measured frontier when no other plan of its width is
both smaller (peak) and faster (ratio). Ratios closer than the race's resolution (about 2-5% between copies of one
plan in one race, benchmarks/README.md) do not tell plans apart: the table says which frontier points stand on a
margin that small.

Results are kept in a JSON state file as they come (a stopped run resumes where it was), printed as a table per
width and drawn, peak against time, in a PNG with the frontier marked.

    python benchmarks/compress_frontier.py [--widths 512 1024 2048] [--steps 25]
        [--state benchmarks/data/compress_frontier.json] [--png benchmarks/compress_frontier.png]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from mf_memopt.auto.timing import load_average  # noqa: E402 (the checkout's package, run as a script)
CONFIG = REPO / "benchmarks" / "llama_medium.yaml"
MiB = 2**20
# plans per race, keep included: a race holds every plan's compiled step at once (four and then three at hidden 2048
# were killed for memory on this 23 GiB machine)
RACE_SIZE = {512: 4, 1024: 4, 2048: 2}
RESOLUTION = 0.02                  # ratios closer than this are not told apart here
# hidden size -> (layers, heads, batch). A step's matmuls grow as tokens x hidden^2 x layers, a layer's activations
# as tokens x hidden and its parameters as hidden^2: the layers are cut as the width grows so that a race of four
# plans takes minutes, and at 2048 the batch doubles so that activations, not the optimizer step's gradients and
# updated parameters, set the peak (with 2 layers of batch 2, keep peaked at 917 MiB and every recompute at 825,
# the optimizer step: no plan could be told apart on memory)
WIDTHS = {512: (8, 8, 2), 1024: (4, 8, 2), 2048: (2, 16, 4)}
NO_RECOMPUTE = {"recompute": False, "select_recompute": False, "select_comm_recompute": False}
MLP, ATTENTION = r"feed_forward\.(w1|w2|w3)", r"attention\.(wq|wk|wv|wo)"


def _compress(*entries: tuple[str, str]) -> dict:
    return {"compress": True, "op_compress": [{"op_name": pattern, "method": method, "layers": True}
                                              for pattern, method in entries]}


def _recompute(**select: bool) -> dict:
    return {**NO_RECOMPUTE, "select_recompute": dict(select)}


PLANS: dict[str, dict] = {
    "keep": {"recompute_config": NO_RECOMPUTE},
    "recompute attention": {"recompute_config": _recompute(attention=True)},
    "recompute MLP": {"recompute_config": _recompute(feed_forward=True)},
    "full recompute": {"recompute_config": {**NO_RECOMPUTE, "recompute": True}},
    **{f"{method} MLP": {"recompute_config": NO_RECOMPUTE, "compress_config": _compress((MLP, method))}
       for method in ("int8", "int4", "int2")},
    **{f"{method} every linear": {"recompute_config": NO_RECOMPUTE,
                                  "compress_config": _compress((ATTENTION, method), (MLP, method))}
       for method in ("int8", "int4", "int2")},
    "lossless": {"recompute_config": NO_RECOMPUTE, "compress_config": {"compress": True, "compress_dense": "level0"}},
    "recompute attention + int8 MLP": {"recompute_config": _recompute(attention=True),
                                       "compress_config": _compress((MLP, "int8"))},
}
COMPRESSED = {name for name, plan in PLANS.items() if "compress_config" in plan}


def plan_config(width: int, name: str, directory: Path) -> Path:
    """llama_medium at `width` with plan `name`'s recompute_config and compress_config."""
    document = yaml.safe_load(CONFIG.read_text())
    layers, heads, batch = WIDTHS[width]
    document["model"]["model_config"].update(hidden_size=width, num_layers=layers, num_heads=heads, batch_size=batch)
    document["runner_config"]["batch_size"] = document["train_dataset"]["batch_size"] = batch
    document.pop("compress_config", None)
    document.update(copy.deepcopy(PLANS[name]))
    slug = name.replace(" ", "_").replace("+", "and")
    path = directory / f"w{width}_{slug}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def races(names: list[str], size: int) -> list[list[str]]:
    """keep plus at most `size` - 1 others per race, in the table's order."""
    others = [name for name in names if name != "keep"]
    return [["keep", *others[start:start + size - 1]] for start in range(0, len(others), size - 1)]


def measure_width(width: int, state: dict, steps: int, save) -> None:
    from mf_memopt.runs.measure import measure_peak

    results = state.setdefault(str(width), {})
    with tempfile.TemporaryDirectory(prefix=f"mf_memopt_frontier_{width}_") as tmp:
        work = Path(tmp)
        for name in PLANS:
            entry = results.setdefault(name, {})
            if "peak_mib" not in entry:
                measured = measure_peak(plan_config(width, name, work), runtime="cpu")
                entry["peak_mib"] = measured.peak_bytes / MiB
                save()
                print(f"  hidden {width}: {name}: peak {entry['peak_mib']:.0f} MiB", flush=True)
        race_all(width, results, steps, work, save)
        results["keep"]["ratio"] = 1.0


def race_all(width: int, results: dict, steps: int, work: Path, save) -> None:
    """Race every plan without a ratio yet, RACE_SIZE[width] plans a race; a race killed for memory (SIGKILL) makes
    the races one plan smaller, down to keep and one plan."""
    from mf_memopt.auto.race import paired_ratio, step_times
    from mf_memopt.runs.runner import ChildKilled, race_child

    size, number = RACE_SIZE[width], 0
    while missing := [name for name in PLANS if name != "keep" and "ratio" not in results[name]]:
        group, number = races(missing, size)[0], number + 1
        race_dir = work / f"race{number}"
        race_dir.mkdir()
        configs = [plan_config(width, name, race_dir) for name in group]
        before = load_average()
        try:
            done = race_child(configs, work=race_dir, steps=steps)
        except ChildKilled:
            if size <= 2:
                raise
            size -= 1
            print(f"  hidden {width}: a race of {len(group)} plans was killed for memory: {size} plans a race",
                  flush=True)
            continue
        times = step_times(done.log, len(group))
        results["keep"].setdefault("keep_ms", []).append(statistics.median(times[0]) * 1e3)
        for name, seconds in zip(group[1:], times[1:]):
            results[name].update(ratio=paired_ratio(seconds, times[0]), step_ms=statistics.median(seconds) * 1e3,
                                 race=number, load=f"{before} -> {load_average()}")
        save()
        print(f"  hidden {width}: race {number} ({', '.join(group)}): "
              + ", ".join(f"{name} {results[name]['ratio']:.3f}" for name in group[1:]), flush=True)


def frontier(results: dict) -> set[str]:
    """The plans no other plan beats on both peak and ratio (smaller or equal on both, smaller on one)."""
    points = {name: (entry["peak_mib"], entry["ratio"]) for name, entry in results.items() if "ratio" in entry}
    return {name for name, (peak, ratio) in points.items()
            if not any(other != name and p <= peak and r <= ratio and (p < peak or r < ratio)
                       for other, (p, r) in points.items())}


def table(width: int, results: dict) -> list[str]:
    on = frontier(results)
    keep_ms = statistics.median(results["keep"].get("keep_ms") or [float("nan")])
    layers, heads, batch = WIDTHS[width]
    lines = [f"hidden {width} ({layers} layers, {heads} heads, seq 512, batch {batch}, float32): "
             f"keep's median step {keep_ms:.0f} ms",
             f"  {'plan':32} {'peak MiB':>9} {'vs keep':>8}  frontier"]
    for name in sorted(results, key=lambda name: results[name]["peak_mib"]):
        entry = results[name]
        if "ratio" not in entry:
            lines.append(f"  {name:32} {entry['peak_mib']:9.0f} {'-':>8}  not raced")
            continue
        mark = "yes" if name in on else ""
        if name in on and _within_resolution(name, results):
            mark += " (within 2% of a plan it beats on peak)"
        lines.append(f"  {name:32} {entry['peak_mib']:9.0f} {entry['ratio']:8.3f}  {mark}")
    if all("ratio" in entry for entry in results.values()):
        compressed = sorted(on & COMPRESSED)
        lines.append(f"  compressed plans on the frontier: {', '.join(compressed) if compressed else 'none'}")
    return lines


def _within_resolution(name: str, results: dict) -> bool:
    """Whether a plan beats some smaller plan on time by less than the resolution (so its place is not sure)."""
    peak, ratio = results[name]["peak_mib"], results[name]["ratio"]
    return any(entry["peak_mib"] < peak and 0 <= entry["ratio"] - ratio < RESOLUTION
               for other, entry in results.items() if other != name and "ratio" in entry)


def draw(state: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    widths = [width for width in sorted(state, key=int) if all("ratio" in entry for entry in state[width].values())]
    figure, axes = plt.subplots(1, len(widths), figsize=(max(7, 6 * len(widths)), 5.5), squeeze=False)
    for axis, width in zip(axes[0], widths):
        results = state[width]
        on = frontier(results)
        for name, entry in results.items():
            colour = "tab:red" if name in COMPRESSED else "tab:blue"
            axis.scatter(entry["ratio"], entry["peak_mib"], color=colour, marker="o" if name in on else "x")
            axis.annotate(name, (entry["ratio"], entry["peak_mib"]), fontsize=7, xytext=(3, 3),
                          textcoords="offset points")
        line = sorted((results[name]["ratio"], results[name]["peak_mib"]) for name in on)
        axis.step([x for x, _ in line], [y for _, y in line], where="post", color="grey", linestyle="--")
        axis.set_title(f"hidden {width}, {WIDTHS[int(width)][0]} layers")
        axis.set_xlabel("step time / keep's (paired, one race)")
        axis.set_ylabel("memory-pool peak (MiB)")
    figure.suptitle("recompute (blue) and compression (red)\no: on the measured frontier, x: smaller and faster plan exists",
                    fontsize=10)
    figure.tight_layout()
    figure.savefig(png, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", nargs="+", type=int, choices=sorted(WIDTHS), default=sorted(WIDTHS))
    parser.add_argument("--steps", type=int, default=25, help="steps per race, the first 5 untimed")
    parser.add_argument("--state", type=Path, default=REPO / "benchmarks" / "data" / "compress_frontier.json")
    parser.add_argument("--png", type=Path, default=REPO / "benchmarks" / "compress_frontier.png")
    parser.add_argument("--report-only", action="store_true", help="print and draw the state file, measure nothing")
    args = parser.parse_args(argv)
    state = json.loads(args.state.read_text()) if args.state.exists() else {}

    def save() -> None:
        args.state.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")

    for width in [] if args.report_only else args.widths:
        print(f"hidden {width}, {args.steps} steps per race; {load_average()}", flush=True)
        measure_width(width, state, args.steps, save)
    save()
    for width in sorted(state, key=int):
        print("\n".join(table(int(width), state[width])))
    draw(state, args.png)
    print(f"drawn: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
