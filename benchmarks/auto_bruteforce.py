"""`auto --runtime cpu --measure` against brute force, on small held-out configs (issue 37).

    python benchmarks/auto_bruteforce.py [--state DIR] [--fresh] [--repeats 2]

For each config in `CONFIGS` (a Llama and an mcore Qwen3, written for this benchmark after the last change to the
planner and never used to tune it; see `DRAWN`):

1. The reference plans "nothing" and "full recompute" are trained (the launcher, `timing.STEPS` steps, its own
   process); the three budgets are a quarter, half and three quarters of the way between their measured pool peaks.
2. Every plan the YAML's count forms express (`mf_memopt.auto.space`: one full-recompute count and one count per
   select cell; counts below the full count write the same layers, the only reduction) is estimated, and every
   plan the estimate calls feasible at the highest budget is trained once: its pool peak and step time.
3. `auto` plans each budget as a user runs it: its step-time profile is measured (cached in the state directory),
   then `--measure` (the peak rounds, then the plan and its 2 nearest rivals trained, interleaved). Its runs are
   its own: none is shared with step 2.
4. The contenders of each budget (auto's plan, the 3 fastest plans of step 2 that held the budget, full recompute)
   are trained `--repeats` more times, interleaved; a plan's time is the median of all its timed steps.
5. Printed per budget: auto's plan, its measured peak, its rank among the measured plans that hold the budget, its
   time over the fastest one's, and at the mid budget its time over full recompute's. `uptime`'s load is recorded
   at every run and printed with the numbers.

Every run is kept in `--state` (default: `mf_memopt_auto_bruteforce` in the system's temporary directory): a
second call re-uses them and trains only what is missing (`--fresh` starts over). Done when auto holds every budget
by measurement, is within 3% of the fastest, and is at least 10% faster than full recompute at the mid budget.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HELD_OUT = REPO / "benchmarks" / "heldout37"
CONFIGS = (HELD_OUT / "llama_2l_h320_s384.yaml", HELD_OUT / "qwen3_2l_h192_s384.yaml")
DRAWN = ("both configs were written for this benchmark with issue 37's first planner change (measured time model, "
         "plan space) and never used to tune the plan search; after a first run on them under load, the profile's "
         "statistics were changed (two runs per choice, a recompute never cheaper than what it contains) to tame "
         "noise seen there")
SHARES = (0.25, 0.5, 0.75)
CONTENDERS = 3
MiB = 2**20


class Runs:
    """Training runs kept on disk by (config, plan sections, role, repeat): resumable."""

    def __init__(self, state: Path):
        self.state = state
        self.path = state / "runs.json"
        self.data = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def get(self, config: Path, text: str, role: str, repeat: int):
        from mf_memopt.auto.timing import Trained, train_run

        key = f"{config.stem}|{role}|{repeat}|{_digest(text)}"
        if key not in self.data:
            work = Path(tempfile.mkdtemp(prefix="run_", dir=self.state))
            written = work / "config.yaml"
            written.write_text(text)
            began = time.perf_counter()
            trained = train_run(written, work)
            self.data[key] = {"peak_bytes": trained.peak_bytes, "step_s": list(trained.step_s),
                              "load": os.getloadavg()[0], "seconds": time.perf_counter() - began}
            shutil.rmtree(work, ignore_errors=True)
            self.path.write_text(json.dumps(self.data, indent=0))
        item = self.data[key]
        return Trained(peak_bytes=item["peak_bytes"], step_s=tuple(item["step_s"])), item["load"]


def _digest(text: str) -> str:
    """The plan's identity: the YAML without comment lines (auto's header names the budget)."""
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def bench(config: Path, runs: Runs, repeats: int, log) -> dict:
    from mf_memopt.auto import auto_plan
    from mf_memopt.auto.choices import KEEP, Choice
    from mf_memopt.auto.measure import measure_plan
    from mf_memopt.auto.space import PlanSpace, cached_or_profiled
    from mf_memopt.auto.writer import Assignment

    space = PlanSpace(config)
    context = space.context

    def text_of(choices) -> str:
        return context.text_of(Assignment(choices=dict(zip(space.layers, choices)), prefetch={}))

    candidates = {item.name: item for item in space.candidates()}
    samples: dict[str, list] = {}
    loads: list[float] = []

    def train(name: str, text: str, role: str, repeat: int):
        trained, load = runs.get(config, text, role, repeat)
        loads.append(load)
        samples.setdefault(name, []).append(trained)
        log(f"  {config.stem}: {role} {repeat}: {name}: peak {trained.peak_bytes / MiB:.0f} MiB, median step "
            f"{trained.median_s * 1e3:.0f} ms (load {load:.2f})")
        return trained

    n = len(space.layers)
    full_name = space.candidate((Choice(full=True),) * n).name
    none_name = space.candidate((KEEP,) * n).name
    full = train(full_name, text_of((Choice(full=True),) * n), "survey", 0)
    none = train(none_name, text_of((KEEP,) * n), "survey", 0)
    budgets = [int((full.peak_bytes + share * (none.peak_bytes - full.peak_bytes)) // MiB * MiB) for share in SHARES]
    feasible = [item for item in candidates.values() if item.peak <= budgets[-1]]
    log(f"{config.name}: {len(candidates)} plans in the space, {len(feasible)} estimated feasible at the highest "
        f"budget {budgets[-1] / MiB:.0f} MiB")
    for item in feasible:
        if item.name not in samples:
            train(item.name, text_of(item.choices), "survey", 0)

    # auto, as a user runs it: its own profile (cached in the state directory) and its own --measure runs
    os.environ["MF_MEMOPT_CACHE"] = str(runs.state / "cache")
    times = cached_or_profiled(config, measure=True, report=log)
    picks = {}
    for budget in budgets:
        def plan_for(target: int):
            return auto_plan(config, budget=target, runtime="cpu", margin=0.0, times=times)

        seen: dict[str, int] = {}

        def own(path: Path, work: Path, seen=seen):
            # auto's n-th run of a plan in this budget's --measure is its n-th run: a plan auto trains again
            # at another budget re-uses those runs, as the same command on the same machine would measure them
            text = path.read_text()
            seen[_digest(text)] = repeat = seen.get(_digest(text), -1) + 1
            return runs.get(config, text, "auto", repeat)[0]

        _, plan, timed = measure_plan(config, plan_for, budget, times, train=own,
                                      report=lambda line: log(f"  auto {budget / MiB:.0f} MiB: {line}"))
        chosen = tuple(option.choice for stage in plan.stages for option in stage.options)
        picks[budget] = space.candidate(chosen).name
        log(f"  auto {budget / MiB:.0f} MiB: kept {picks[budget]}")

    # the contenders of each budget, trained again, interleaved
    def median(name: str) -> float:
        return statistics.median(step for run in samples[name] for step in run.step_s)

    def peak(name: str) -> int:
        return max(run.peak_bytes for run in samples[name])

    contenders: list[str] = []
    for budget in budgets:
        holding = sorted((name for name in samples if peak(name) <= budget), key=median)
        for name in [picks[budget], *holding[:CONTENDERS], full_name]:
            if name not in contenders:
                contenders.append(name)
    for name in contenders:      # auto's pick may be a plan the survey did not train (estimated infeasible)
        if name not in samples:
            train(name, text_of(candidates[name].choices), "survey", 0)
    for repeat in range(1, repeats + 1):
        for name in contenders:
            train(name, text_of(candidates[name].choices), "survey", repeat)

    rows = []
    for share, budget in zip(SHARES, budgets):
        holding = sorted((name for name in samples if peak(name) <= budget), key=median)
        pick = picks[budget]
        rank = holding.index(pick) + 1 if pick in holding else None
        rows.append({"budget_mib": budget / MiB, "share": share, "auto": pick, "auto_peak_mib": peak(pick) / MiB,
                     "holds": peak(pick) <= budget, "rank": rank, "of": len(holding),
                     "fastest": holding[0] if holding else None, "auto_ms": median(pick) * 1e3,
                     "fastest_ms": median(holding[0]) * 1e3 if holding else None,
                     "vs_fastest": median(pick) / median(holding[0]) if holding else None,
                     "vs_full": median(pick) / median(full_name)})
    return {"config": config.name, "plans": len(candidates), "trained": len(samples), "rows": rows,
            "full_ms": median(full_name) * 1e3, "none_ms": median(none_name) * 1e3,
            "load_min": min(loads), "load_median": statistics.median(loads), "load_max": max(loads),
            "profile": times.added_s if times else None, "profile_source": times.source if times else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", type=Path, default=Path(tempfile.gettempdir()) / "mf_memopt_auto_bruteforce")
    parser.add_argument("--fresh", action="store_true", help="forget the runs kept in --state")
    parser.add_argument("--repeats", type=int, default=2, help="further runs of each budget's contenders")
    args = parser.parse_args(argv)
    os.environ.setdefault("GLOG_v", "3")
    if args.fresh and args.state.exists():
        shutil.rmtree(args.state)
    args.state.mkdir(parents=True, exist_ok=True)
    runs = Runs(args.state)
    began = time.perf_counter()

    def log(line: str) -> None:
        print(line, flush=True)

    log(f"uptime at start: {os.popen('uptime').read().strip()}")
    results = [bench(config, runs, args.repeats, log) for config in CONFIGS]
    print()
    print(f"command: python benchmarks/auto_bruteforce.py --repeats {args.repeats} (state {args.state})")
    print(f"held-out configs: {DRAWN}")
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
