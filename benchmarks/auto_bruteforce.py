"""`auto --runtime cpu --measure` against brute force, on small held-out configs (issue 37).

    python benchmarks/auto_bruteforce.py [--seed N | --configs YAML...] [--state DIR] [--fresh] [--runs 2] [--steps 40]

The configs are drawn by `draw(seed)`: one Llama and one mcore Qwen3, 3 layers, float32, shapes drawn from ranges
where recompute costs time on CPU (sequence 640-1280, at least four times the hidden size 64-192: the attention
scores dominate: full recompute cost +30% and +37% of a step on seed 20261126's pair), flash attention
drawn on or off, batch 1 or 2. `SEEDS` records, for each seed, the planner commit it was drawn after; the
benchmark prints it and `git log`'s last change to the planner (`mf_memopt/auto`), so a reader sees whether the
configs were drawn after it.

For each config:
1. The pool peaks of the reference plans "nothing" and "full recompute" are measured (the launcher, one step, its
   own process); the three budgets are a quarter, half and three quarters of the way between them.
2. `auto` plans each budget as a user runs it: its step-time profile is measured (a race, cached in the state
   directory), then `--measure` (the peak rounds, then the peaks of the plan's 3 nearest rivals and a race of those
   within the budget). Its measurements are its own: none is counted in the comparison.
3. The referee: every plan the YAML's count forms express (`mf_memopt.auto.space`: one full-recompute count and one
   count per select cell; counts below the full count write the same layers, the only reduction) is estimated;
   every plan the estimate calls feasible at the highest budget, auto's picks and the two references get their
   pool peak from a run of their own (one step), then they are raced in `--runs` passes (default 2): each race is
   one process training "nothing recomputed" and up to `GROUP` of them a step at a time for `--steps` steps
   (`mf_memopt.auto.race`), the groups drawn anew each pass. A plan's time is its time over "nothing"'s in the same
   race (`race.paired_ratio`: the median over the steps after the fifth of its step over "nothing"'s step of the
   same batch; the median over the passes) times "nothing"'s median time (the lower quartile of its steps), so
   races in separate processes are compared through the plan they share.
4. Printed per budget: auto's plan, its measured peak, its rank among the measured plans that hold the budget, its
   time over the fastest one's, and at the mid budget its time over full recompute's. The load average is recorded
   at every measurement and printed with the numbers.

Every measurement is kept in `--state` (default: `mf_memopt_auto_bruteforce` in the system's temporary directory): a
second call re-uses them and trains only what is missing (`--fresh` starts over). Done when auto holds every budget
by measurement, is within 3% of the fastest, and is at least 10% faster than full recompute at the mid budget.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# seed -> the planner commit it was drawn after (the benchmark's first run on it came after that commit)
SEEDS = {20261126: "696e69e (the wall-clock lower quartile after the warm-up, 3 rivals); the later commits to "
                   "mf_memopt/auto (a3942f9, c1672d7, ea817fd) change docstrings and a dataclass's fields, no choice",
         20261127: "8932d73 (plans raced in one process: the profile and --measure's time loop); the later "
                   "commits to mf_memopt/auto (a1028c5, cfb8093, 898fa34, the review's profile_config cleanup) "
                   "change docstrings, a comment, how the race child hands each config on and an unused "
                   "parameter, no choice",
         20261128: "ce68fc8 (plans in a race compared step by step: the profile, --measure's time loop and the "
                   "referee; races of 40 steps)",
         20261129: "ac4d511 (a rival replaces auto's plan only when its race times it faster by more than 5%); the "
                   "later commit to mf_memopt/auto (174b27f) changes a comment"}
DEFAULT_SEED = 20261129
SHARES = (0.25, 0.5, 0.75)
GROUP = 6                   # plans per referee race besides the anchor (a race holds each plan's compiled step,
                            # about 0.9 GB for these configs: 27 plans at once ran out of 24 GiB)
LAYERS = 3
STEPS = 40                  # steps of each plan in a referee race (35 timed): auto's own races take race.STEPS
MiB = 2**20


def draw(seed: int) -> dict[str, str]:
    """One Llama and one Qwen3 config (name -> YAML text), a function of the seed alone."""
    rng = random.Random(seed)
    drawn = {}
    for family, base in (("llama", "configs/llama_tiny.yaml"), ("qwen3", "configs/qwen3_tiny.yaml")):
        data = yaml.safe_load((REPO / base).read_text())
        hidden = rng.randrange(64, 193, 32)
        seq = rng.randrange(max(640, 4 * hidden), 1281, 64)
        batch = rng.choice((1, 2))
        flash = rng.choice((False, True))
        heads = hidden // 32
        model = data["model"]["model_config"]
        if family == "llama":
            model.update(num_layers=LAYERS, hidden_size=hidden, num_heads=heads, seq_length=seq, batch_size=batch,
                         use_flash_attention=flash)
        else:
            groups = rng.choice([g for g in (1, 2, heads) if heads % g == 0])
            groups = groups if flash else heads      # grouped query attention needs flash attention here;
                                                     # drawn all the same, so earlier seeds draw as before
            model.update(num_hidden_layers=LAYERS, hidden_size=hidden, num_attention_heads=heads, head_dim=32,
                         num_key_value_heads=groups, intermediate_size=rng.randrange(2 * hidden, 4 * hidden + 1, 32),
                         seq_length=seq, max_position_embeddings=seq, use_flash_attention=flash)
        data["runner_config"]["batch_size"] = batch
        data["train_dataset"]["batch_size"] = batch
        data["recompute_config"] = {"recompute": False, "select_recompute": False, "select_comm_recompute": False}
        name = f"{family}_{LAYERS}l_h{hidden}_s{seq}_b{batch}{'_flash' if flash else ''}"
        drawn[name] = (f"# drawn by benchmarks/auto_bruteforce.py --seed {seed}\n"
                       + yaml.safe_dump(data, sort_keys=False))
    return drawn


def planner_change() -> str:
    """The last commit that changed the planner (`mf_memopt/auto`), as git names it."""
    try:
        return subprocess.run(["git", "log", "-1", "--format=%h %cs %s", "--", "mf_memopt/auto"], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout.strip()[:100]
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


class Runs:
    """Measurements kept on disk (resumable): pool peaks by (config, plan sections), races by (config, pass), auto's
    picks by (config, budget)."""

    def __init__(self, state: Path):
        self.state = state
        self.path = state / "runs.json"
        self.data = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def _kept(self, key: str, measure):
        if key not in self.data:
            began = time.perf_counter()
            self.data[key] = {**measure(), "load": os.getloadavg()[0], "seconds": time.perf_counter() - began}
            self.path.write_text(json.dumps(self.data, indent=0))
        return self.data[key]

    def peak(self, config: Path, text: str) -> tuple[int, float]:
        """The plan's pool peak (the launcher, one step, its own process) and the load average after it."""
        from mf_memopt.auto.measure import train_peak

        def measure():
            work = Path(tempfile.mkdtemp(prefix="peak_", dir=self.state))
            (work / "config.yaml").write_text(text)
            try:
                return {"peak_bytes": train_peak((work / "config.yaml").resolve(), work / "run")}
            finally:
                shutil.rmtree(work, ignore_errors=True)

        item = self._kept(f"{config.stem}|peak|{_digest(text)}", measure)
        return item["peak_bytes"], item["load"]

    def race(self, config: Path, texts: dict[str, str], repeat: int, steps: int
             ) -> tuple[dict[str, list[float]], float]:
        """Race pass `repeat` of the plans (name -> YAML text) in one process, `steps` steps: each plan's timed step
        seconds."""
        from mf_memopt.auto.race import race

        def measure():
            work = Path(tempfile.mkdtemp(prefix="race_", dir=self.state))
            paths = []
            for index, text in enumerate(texts.values()):
                paths.append((work / f"plan{index}.yaml").resolve())
                paths[-1].write_text(text)
            try:
                return {"step_s": dict(zip(texts, map(list, race(paths, work / "run", steps))))}
            finally:
                shutil.rmtree(work, ignore_errors=True)

        plans = _digest("".join(sorted(map(_digest, texts.values()))))
        item = self._kept(f"{config.stem}|race|{repeat}|{steps}|{plans}", measure)
        return item["step_s"], item["load"]

    def pick(self, config: Path, budget: int, choose) -> str:
        return self._kept(f"{config.stem}|auto|{budget}", lambda: {"pick": choose()})["pick"]


def _digest(text: str) -> str:
    """The plan's identity: the YAML without comment lines (auto's header names the budget)."""
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def bench(config: Path, runs: Runs, passes: int, steps: int, log) -> dict:
    from mf_memopt.auto import auto_plan
    from mf_memopt.auto.choices import KEEP, Choice
    from mf_memopt.auto.measure import measure_plan
    from mf_memopt.auto.race import lower_quartile, paired_ratio
    from mf_memopt.auto.space import PlanSpace, cached_or_profiled
    from mf_memopt.auto.writer import Assignment
    from mf_memopt.config.load import load_document

    space = PlanSpace(config)
    context = space.context

    def text_of(choices) -> str:
        return context.text_of(Assignment(choices=dict(zip(space.layers, choices)), prefetch={}))

    candidates = {item.name: item for item in space.candidates()}
    peaks: dict[str, int] = {}
    loads: list[float] = []

    def peak(name: str, text: str) -> int:
        peaks[name], load = runs.peak(config, text)
        loads.append(load)
        log(f"  {config.stem}: peak: {name}: {peaks[name] / MiB:.0f} MiB (load {load:.2f})")
        return peaks[name]

    n = len(space.layers)
    full_name = space.candidate((Choice(full=True),) * n).name
    none_name = space.candidate((KEEP,) * n).name
    full, none = peak(full_name, text_of((Choice(full=True),) * n)), peak(none_name, text_of((KEEP,) * n))
    budgets = [int((full + share * (none - full)) // MiB * MiB) for share in SHARES]

    # auto, as a user runs it: its own profile (cached in the state directory) and its own --measure runs
    os.environ["MF_MEMOPT_CACHE"] = str(runs.state / "cache")
    times = cached_or_profiled(config, measure=True, report=log)
    picks = {}
    for budget in budgets:
        def choose(budget=budget) -> str:
            def plan_for(target: int):
                return auto_plan(config, budget=target, runtime="cpu", margin=0.0, times=times)

            _, plan, _ = measure_plan(load_document(config), plan_for, budget, times,
                                      report=lambda line: log(f"  auto {budget / MiB:.0f} MiB: {line}"))
            return space.candidate(tuple(option.choice for stage in plan.stages for option in stage.options)).name

        picks[budget] = runs.pick(config, budget, choose)
        log(f"  auto {budget / MiB:.0f} MiB: kept {picks[budget]}")

    # the referee: every plan estimated feasible at the highest budget (auto's picks, nothing and full recompute
    # too), each one's peak alone, then `passes` passes of races (below)
    names = sorted({item.name for item in candidates.values() if item.peak <= budgets[-1]}
                   | set(picks.values()) | {full_name, none_name})
    log(f"{config.name}: {len(candidates)} plans in the space, {len(names)} estimated feasible at the highest budget "
        f"{budgets[-1] / MiB:.0f} MiB (with auto's picks and the references): each one's peak, then {passes} races")
    texts = {name: text_of(candidates[name].choices) for name in names}
    for name in names:
        peak(name, texts[name])
    # each race: nothing recomputed (the anchor) and up to GROUP plans, drawn anew each pass; a plan's time is its
    # time over the anchor's in the same race (median over the passes) times the anchor's median time
    others = [name for name in names if name != none_name]
    ratios: dict[str, list[float]] = {name: [] for name in names}
    anchors: list[float] = []
    for repeat in range(passes):
        order = sorted(others)
        random.Random(repeat).shuffle(order)
        for first in range(0, len(order), GROUP):
            members = [none_name, *order[first:first + GROUP]]
            timed, load = runs.race(config, {name: texts[name] for name in members}, repeat, steps)
            loads.append(load)
            anchors.append(lower_quartile(timed[none_name]))
            for name in members:
                ratios[name].append(paired_ratio(timed[name], timed[none_name]))
            log(f"  {config.stem}: pass {repeat + 1}/{passes}, race of {len(members)} (load {load:.2f}): nothing "
                f"{anchors[-1] * 1e3:.0f} ms; " + ", ".join(f"{name} x{ratios[name][-1]:.3f}" for name in members[1:]))
    scale = statistics.median(anchors)

    def time_of(name: str) -> float:      # over the anchor in its races (median), times the anchor's median time
        return statistics.median(ratios[name]) * scale

    rows = []
    for share, budget in zip(SHARES, budgets):
        holding = sorted((name for name in names if peaks[name] <= budget), key=time_of)
        pick = picks[budget]
        rank = holding.index(pick) + 1 if pick in holding else None
        rows.append({"budget_mib": budget / MiB, "share": share, "auto": pick, "auto_peak_mib": peaks[pick] / MiB,
                     "holds": peaks[pick] <= budget, "rank": rank, "of": len(holding),
                     "fastest": holding[0] if holding else None, "auto_ms": time_of(pick) * 1e3,
                     "fastest_ms": time_of(holding[0]) * 1e3 if holding else None,
                     "vs_fastest": time_of(pick) / time_of(holding[0]) if holding else None,
                     "vs_full": time_of(pick) / time_of(full_name)})
    return {"config": config.name, "plans": len(candidates), "trained": len(names), "rows": rows,
            "full_ms": time_of(full_name) * 1e3, "none_ms": time_of(none_name) * 1e3,
            "load_min": min(loads), "load_median": statistics.median(loads), "load_max": max(loads),
            "profile": times.added_s if times else None, "profile_source": times.source if times else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", type=Path, default=Path(tempfile.gettempdir()) / "mf_memopt_auto_bruteforce")
    parser.add_argument("--fresh", action="store_true", help="forget the runs kept in --state")
    parser.add_argument("--runs", type=int, default=2, help="races of every plan compared, each in one process")
    parser.add_argument("--steps", type=int, default=STEPS,
                        help=f"steps of each plan in a referee race (default {STEPS})")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED,
                        help=f"draw the configs from this seed (default {DEFAULT_SEED}; recorded: {sorted(SEEDS)})")
    parser.add_argument("--configs", type=Path, nargs="+", help="benchmark these YAMLs instead of drawn ones")
    args = parser.parse_args(argv)
    os.environ.setdefault("GLOG_v", "3")
    if args.fresh and args.state.exists():
        shutil.rmtree(args.state)
    args.state.mkdir(parents=True, exist_ok=True)
    runs = Runs(args.state)
    began = time.perf_counter()

    def log(line: str) -> None:
        print(line, flush=True)

    if args.configs:
        configs = [path.resolve() for path in args.configs]
        drawn = f"given by --configs: {', '.join(path.name for path in configs)}"
        command = f"--configs {' '.join(str(path) for path in args.configs)}"
    else:
        folder = args.state / "configs"
        folder.mkdir(exist_ok=True)
        configs = []
        for name, text in draw(args.seed).items():
            (folder / f"{name}.yaml").write_text(text)
            configs.append(folder / f"{name}.yaml")
        drawn = (f"drawn from seed {args.seed} ({', '.join(path.stem for path in configs)}); "
                 + (f"drawn after {SEEDS[args.seed]}" if args.seed in SEEDS else "a seed not recorded in SEEDS"))
        command = f"--seed {args.seed}"
    log(f"uptime at start: {os.popen('uptime').read().strip()}")
    results = [bench(config, runs, args.runs, args.steps, log) for config in configs]
    print()
    print(f"command: python benchmarks/auto_bruteforce.py {command} --runs {args.runs} --steps {args.steps} "
          f"(state {args.state})")
    print(f"configs: {drawn}")
    print(f"the planner's last change (git log -1 -- mf_memopt/auto): {planner_change()}")
    verdicts = []
    for result in results:
        print(f"\n{result['config']}: {result['plans']} plans in the space, {result['trained']} trained; nothing "
              f"{result['none_ms']:.0f} ms, full recompute {result['full_ms']:.0f} ms per step; load average "
              f"{result['load_min']:.2f}-{result['load_max']:.2f} (median {result['load_median']:.2f}) over its runs")
        if result["profile"]:
            profile = ", ".join(f"{name} {value * 1e3:.1f} ms" for name, value in sorted(result["profile"].items()))
            print(f"  auto's profile (added per layer and step): {profile}")
        print(f"  {'budget':>8}  {'auto plan':<58} {'peak':>5} {'holds':>5} {'rank':>6} {'auto ms':>7} "
              f"{'best ms':>7} {'/best':>6} {'/full':>6}")
        for row in result["rows"]:
            ok = row["holds"] and row["vs_fastest"] is not None and row["vs_fastest"] <= 1.03
            if row["share"] == 0.5:
                ok = ok and row["vs_full"] <= 0.90
            verdicts.append(ok)
            rank = f"{row['rank']}/{row['of']}" if row["rank"] else f"-/{row['of']}"
            print(f"  {row['budget_mib']:>5.0f}MiB  {row['auto']:<58} {row['auto_peak_mib']:>5.0f} "
                  f"{'yes' if row['holds'] else 'NO':>5} {rank:>6} {row['auto_ms']:>7.0f} "
                  f"{row['fastest_ms'] or 0:>7.0f} {row['vs_fastest'] or 0:>6.3f} {row['vs_full']:>6.3f}"
                  + ("  (fastest: " + row["fastest"] + ")" if row["fastest"] != row["auto"] else ""))
    print(f"\nuptime at end: {os.popen('uptime').read().strip()}; {time.perf_counter() - began:.0f} s")
    print("done (holds every budget, within 3% of the fastest, mid budget <= 0.90x full recompute): "
          + ("yes" if all(verdicts) else "NO"))
    (args.state / "result.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
