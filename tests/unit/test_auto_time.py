"""`auto`'s time side (issue 37): the measured step-time profile, the plan space, pricing by the profile, the
exhaustive search where the layer search cannot express the peak, and `--measure`'s time loop (with a stand-in
for training; tests/mindspore/test_auto_time.py trains for real)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import yaml

from auto_profiles import no_user_profile, profile_table  # noqa: F401 (no_user_profile: an autouse fixture)
from mf_memopt.auto import auto_plan
from mf_memopt.auto.choices import KEEP, Choice
from mf_memopt.auto.measure import measure_time
from mf_memopt.auto.space import PlanSpace, stage_assignments
from mf_memopt.auto.race import STEPS, WARMUP, lower_quartile, paired_ratio, rotated, step_times
from mf_memopt.auto.timing import load_table, monotone, profile, save_table
from mf_memopt.runs.measure import MeasureError
from mf_memopt.document.source import load_source

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs/llama_tiny.yaml"
QWEN3 = ROOT / "configs/qwen3_tiny.yaml"
MiB = 2**20
FULL = Choice(full=True)
ATTENTION = Choice(select=("attention",))
MLP = Choice(select=("feed_forward",))
BOTH = Choice(select=("feed_forward", "attention"))     # the family's order of its cells


def test_stage_assignments_are_every_distinct_count_plan():
    """k full layers, then one count per select cell from k to n: sum over k of (n - k + 1) ** cells plans, all
    distinct; counts below k write the same layers as k (the one reduction)."""
    cells = ("feed_forward", "attention")
    for n in (1, 2, 4):
        plans = stage_assignments(n, cells)
        assert len(plans) == sum((n - k + 1) ** 2 for k in range(n + 1)) == len(set(plans))
    two = stage_assignments(2, cells)
    assert (FULL, KEEP) in two and (BOTH, ATTENTION) in two and (KEEP, ATTENTION) not in two   # counts: first layers
    assert all(choice in {KEEP, FULL, ATTENTION, MLP, BOTH} for plan in two for choice in plan)


def test_profile_races_every_choice_against_keep():
    """Every choice is raced in one process; its added time per layer is (the median over the races of its step
    over keep's step of the same batch - 1) x keep's step time / layers, never negative; keep's step time is the
    median over the races of the lower quartile of its timed steps. A race run in a slow stretch, or a slow step
    that slows every plan's step of that batch, moves no price."""
    races = []
    step = {"keep": 1.00, "full recompute": 1.40, "recompute attention": 1.30, "recompute feed_forward": 0.98,
            "recompute feed_forward+attention": 1.36}

    def uniform(choice: Choice) -> str:
        return choice.name

    def race(configs: list[Path], work: Path, steps: int) -> list[tuple[float, ...]]:
        races.append([path.read_text() for path in configs])
        slow = 1.3 if len(races) == 2 else 1.0                  # race 2 ran in a slow stretch: every plan alike
        extra = {"recompute attention": 0.1 * (len(races) == 2)}
        times = [(step[name] + extra.get(name, 0.0)) * slow for name in races[-1]]
        # step 1's batch ran 50% slower for every plan, step 2's 10% faster: the pairs keep each plan's ratio
        return [tuple(base * factor for factor in (1.5, 0.9, 1.0, 1.01, 1.02)) for base in times]

    table = profile(load_source(TINY), 4, uniform, [KEEP, ATTENTION, MLP, BOTH, FULL], runs=2, race=race)
    assert len(races) == 2 and races[0] == races[1] and len(set(races[0])) == 5      # every choice in each race
    assert table.samples["keep"] == pytest.approx([1.0, 1.3]) and table.base_s == pytest.approx(1.15)
    assert table.seconds(FULL) == pytest.approx(0.40 * 1.15 / 4)
    assert table.seconds(BOTH) == pytest.approx(0.36 * 1.15 / 4)
    assert table.seconds(ATTENTION) == pytest.approx((0.3 + 0.4) / 2 * 1.15 / 4)   # the median of the races
    assert table.seconds(MLP) == 0.0 and table.seconds(KEEP) == 0.0        # faster than keep: free, not negative
    # the races' spread per layer: the median over the choices of (largest - smallest ratio) x keep's time / layers
    assert table.noise_s == pytest.approx(0.0) and "raced in one process 2 time(s) in 1 race(s)" in table.source


def test_plans_in_a_race_are_compared_step_by_step():
    """A plan's time over another's is the median over the steps of its step over the other's step of the same
    batch: steps that ran slow for both leave it, and one step slow for one plan alone is outvoted. Unpaired
    statistics are fooled by the same steps: the ratio of the lower quartiles, and the ratio of the medians."""
    anchor = (1.0, 1.0, 1.0, 2.0, 2.0)                          # steps 4-5 ran in a slow stretch, for both
    plan = (1.1, 2.5, 2.5, 2.2, 2.2)                            # and steps 2-3 ran slow for the plan alone
    assert paired_ratio(plan, anchor) == pytest.approx(1.1)
    assert lower_quartile(plan) / lower_quartile(anchor) == pytest.approx(2.2)
    assert statistics.median(plan) / statistics.median(anchor) == pytest.approx(2.2)
    assert paired_ratio(anchor, anchor) == 1.0
    with pytest.raises(ValueError, match="no step"):
        paired_ratio((), anchor)


def test_a_race_rotates_the_order_of_its_plans_every_step():
    """Every plan runs in every place of the order equally often over a whole turn, each place once per turn."""
    orders = [rotated(3, step) for step in range(1, 7)]
    assert orders[:3] == [[0, 1, 2], [1, 2, 0], [2, 0, 1]] and orders[3:] == orders[:3]
    for place in range(3):
        assert sorted(order[place] for order in orders[:3]) == [0, 1, 2]
    assert rotated(1, 5) == [0]


def test_a_larger_recompute_never_costs_less_than_the_cells_it_contains():
    """Noise can time both cells below one cell alone; both cells are then charged at least that cell's time.
    Full recompute is measured as it runs (one segment per layer): it may cost less than both cells."""
    choices = {"keep": KEEP, "a": ATTENTION, "f": MLP, "b": BOTH, "full": FULL}
    fixed = monotone({"keep": 0.0, "a": 0.05, "f": 0.02, "b": 0.03, "full": 0.04}, choices)
    assert fixed == {"keep": 0.0, "a": 0.05, "f": 0.02, "b": 0.05, "full": 0.04}


def test_a_plan_is_timed_by_the_lower_quartile_of_its_steps():
    assert lower_quartile((0.9, 0.5, 0.4, 0.41, 0.6, 0.42)) == 0.41          # sorted: 0.4 0.41 0.42 ... (index 1)
    assert lower_quartile((0.45,)) == 0.45


def test_profile_cache_is_per_model_shape(tmp_path):
    """The cache is keyed by the model's shape: another plan section hits it, another hidden size misses it; a
    broken file counts as no profile."""
    source = load_source(TINY)
    table = profile_table(TINY, {"full recompute": 0.1})
    path = save_table(table, source, tmp_path)
    assert load_table(source, tmp_path) == table
    replanned = TINY.read_text().replace("'feed_forward': True", "'attention': True")
    assert load_table(load_source({**yaml.safe_load(replanned)}), tmp_path) == table
    bigger = yaml.safe_load(TINY.read_text())
    bigger["model"]["model_config"]["hidden_size"] = 512
    assert load_table(load_source(bigger), tmp_path) is None
    path.write_text("{not json")
    assert load_table(source, tmp_path) is None


def test_race_lines_are_parsed_per_plan_after_the_warm_up_steps():
    """The first WARMUP steps of each plan are not timed (the compile, then the process settling); a race too short
    to have later steps is timed from its first; a plan with no line is an error naming it."""
    out = "\n".join(f"mf_memopt race: plan {plan} step {n} wall_ms {100 * n + plan}.5"
                    for n in range(1, 8) for plan in (0, 1))
    assert WARMUP == 5 and STEPS - WARMUP >= 20
    assert step_times(out, 2) == [(0.6005, 0.7005), (0.6015, 0.7015)]
    assert step_times("\n".join(out.splitlines()[:4]), 2) == [(0.1005, 0.2005), (0.1015, 0.2015)]
    with pytest.raises(MeasureError, match="no step times for plan\\(s\\) 2"):
        step_times(out, 3)


def test_a_measured_profile_decides_the_plan_where_flops_decide_otherwise():
    """The issue's case: the FLOP model finds recomputing the attention cheap, so auto recomputes it; measured,
    the attention (memory-bound softmax and scores on CPU) costs as much as the whole layer, and the plan
    changes to the one the profile makes fastest, which the exhaustive search over the space confirms."""
    flops = auto_plan(TINY, budget=60 * MiB, runtime="cpu", margin=0.0)
    assert "FLOP model" in flops.time_source
    flop_choices = {option.choice for option in flops.stages[0].options}
    table = profile_table(TINY, {"full recompute": 0.096, "recompute attention": 0.12, "recompute feed_forward": 0.05,
                          "recompute feed_forward+attention": 0.15})
    measured = auto_plan(TINY, budget=60 * MiB, runtime="cpu", margin=0.0, times=table)
    assert measured.time_source == "test profile"
    chosen = tuple(option.choice for option in measured.stages[0].options)
    assert ATTENTION not in chosen and chosen != tuple(flop_choices)
    space = PlanSpace(TINY, times=table)
    best = space.ranked(60 * MiB)[0]
    assert measured.priced_s == pytest.approx(best.priced_s)
    assert measured.priced_s == pytest.approx(sum(table.seconds(choice) for choice in chosen))


@pytest.mark.parametrize("budget_mib", [36, 44, 52, 60, 68])
def test_search_with_a_profile_is_the_brute_force_optimum(budget_mib):
    """The layer search priced by a profile finds the fastest plan of the whole count-form space whose estimate
    (each plan estimated whole: its own peak moment) fits."""
    table = profile_table(TINY, {"full recompute": 0.09, "recompute attention": 0.07, "recompute feed_forward": 0.03,
                          "recompute feed_forward+attention": 0.095})
    space = PlanSpace(TINY, times=table)
    ranked = space.ranked(budget_mib * MiB)
    plan = auto_plan(TINY, budget=budget_mib * MiB, runtime="cpu", margin=0.0, times=table)
    assert plan.priced_s == pytest.approx(ranked[0].priced_s)
    assert max(stage.peak.peak for stage in plan.estimate.stages) <= budget_mib * MiB


@pytest.mark.parametrize("budget_mib", [42, 46, 50, 56, 62])
def test_mcore_cpu_plans_are_the_whole_spaces_best(budget_mib):
    """The mcore Qwen3's cpu moments count a layer's choice in the moments of the layers before it too (the graph's
    constant inputs of a recomputed cell live through the whole step), a term the layer search once refused
    (`PlannerMismatch`, then every plan estimated whole). The search models it: its plan is the fastest of every
    count-form plan estimated whole, with no repair, at budgets from near full recompute to near nothing."""
    space = PlanSpace(QWEN3)
    ranked = space.ranked(budget_mib * MiB)
    plan = auto_plan(QWEN3, budget=budget_mib * MiB, runtime="cpu", margin=0.0)
    assert plan.repairs == ()
    assert plan.priced_s == pytest.approx(ranked[0].priced_s, abs=1e-12)
    assert max(stage.peak.peak for stage in plan.estimate.stages) <= budget_mib * MiB


def test_time_loop_races_the_plans_that_hold_the_budget_and_keeps_the_fastest(tmp_path):
    """Each plan's peak is measured alone (plan 0's is the peak round's, not measured again); a plan over the budget
    is not raced, however fast; the others are raced together and the fastest is kept, by the median over races."""
    plans = [(name, auto_plan(TINY, budget=budget * MiB, runtime="cpu", margin=0.0))
             for name, budget in (("a", 60), ("b", 50), ("c", 70))]
    peaks = {"b": 49 * MiB, "c": 71 * MiB}
    measured, raced = [], []

    def name_of(config: Path) -> str:
        return next(name for name, plan in plans if plan.text == config.read_text())

    def peak(config: Path, work: Path) -> int:
        measured.append(name_of(config))
        return peaks[name_of(config)]

    def race(configs: list[Path], work: Path) -> list[tuple[float, ...]]:
        raced.append([name_of(config) for config in configs])
        slow = 0.5 * (len(raced) == 2)                          # race 2 slower throughout: every plan alike
        return [({"a": 1.2, "b": 1.1}[name] + slow,) for name in raced[-1]]

    winner, timed = measure_time(plans, 60 * MiB, tmp_path, lambda line: None, runs=2, peak=peak, race=race,
                                 known={0: 59 * MiB})
    assert plans[winner][0] == "b" and measured == ["b", "c"] and raced == [["a", "b"], ["a", "b"]]
    assert [(item.name, item.peak, item.times) for item in timed] == [("a", 59 * MiB, (1.2, 1.7)),
                                                                       ("b", 49 * MiB, (1.1, 1.6))]
    assert [item.time_s for item in timed] == pytest.approx([1.45, 1.35])


def test_a_rival_inside_the_race_resolution_does_not_replace_the_plan(tmp_path):
    """Plan 0 is auto's plan, priced fastest by the profile: a rival the race times faster by less than
    RESOLUTION is not told apart from it, and the report says so; a rival faster by more than that is kept."""
    from mf_memopt.auto.measure import RESOLUTION

    plans = [(name, auto_plan(TINY, budget=budget * MiB, runtime="cpu", margin=0.0))
             for name, budget in (("mine", 60), ("rival", 50))]
    assert RESOLUTION == 0.05

    def name_of(config: Path) -> str:
        return next(name for name, plan in plans if plan.text == config.read_text())

    def kept(rival_s: float) -> tuple[str, list[str]]:
        lines: list[str] = []

        def race(configs: list[Path], work: Path) -> list[tuple[float, ...]]:
            return [({"mine": 1.0, "rival": rival_s}[name_of(config)],) * 5 for config in configs]

        winner, _ = measure_time(plans, 60 * MiB, tmp_path, lines.append, peak=lambda config, work: 49 * MiB,
                                 race=race, known={0: 59 * MiB})
        return plans[winner][0], lines

    name, lines = kept(0.97)                    # 3% faster in one race: within the resolution
    assert name == "mine" and "rival ran 3.0% faster than mine: within the race's resolution (5%)" in lines[-1]
    assert kept(0.94)[0] == "rival"             # 6% faster: kept


def test_the_brute_force_benchmark_draws_valid_configs_from_its_seed(tmp_path):
    """benchmarks/auto_bruteforce.py draws its held-out configs from a seed alone: the same seed gives the same
    YAMLs, another seed others; each is a valid 3-layer config of its family with no recompute written, and its
    count-form space has the 30 plans of 3 layers and 2 cells."""
    from benchmarks.auto_bruteforce import DEFAULT_SEED, SEEDS, draw
    from mf_memopt.config.load import load_document

    assert DEFAULT_SEED in SEEDS
    drawn = draw(DEFAULT_SEED)
    assert drawn == draw(DEFAULT_SEED) and drawn != draw(DEFAULT_SEED + 1)
    assert [name.split("_")[0] for name in drawn] == ["llama", "qwen3"]
    for name, text in drawn.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        document = load_document(path)
        assert document.plan is not None, (name, document.issues)
        assert all(layer.full_recompute is None and not layer.select_recompute for layer in document.plan.layers)
        assert len(PlanSpace(document).assignments()) == 30


def test_measures_rivals_are_the_next_fastest_plans_priced_at_the_commands_throughput():
    """`--measure`'s rivals come from the search's k best (not every count-form plan estimated): they are the plans
    after auto's own in the whole space's ranking, and the FLOP model prices them at the command's --tflops."""
    from mf_memopt.auto.space import rivals
    from mf_memopt.config.load import load_document
    from mf_memopt.estimate import Hardware

    budget = 50 * MiB
    plan = auto_plan(QWEN3, budget=budget, runtime="cpu", margin=0.0)
    ranked = [item for item in PlanSpace(QWEN3).ranked(budget)
              if item.choices != tuple(option.choice for option in plan.stages[0].options)]
    found = rivals(load_document(QWEN3), plan, count=3)
    assert [round(rival.priced_s, 15) for _, rival in found] == [round(item.priced_s, 15) for item in ranked[:3]]
    slower = rivals(load_document(QWEN3), plan, count=3, hardware=Hardware(tflops=15.0))
    assert [rival.priced_s for _, rival in slower] == pytest.approx([10 * rival.priced_s for _, rival in found])


def test_a_timing_race_killed_for_memory_is_raced_again_in_halves_with_the_plan_in_each(tmp_path):
    """`--measure` races auto's plan and its rivals at once; where that is more than the machine holds (SIGKILL), it
    races them in halves, auto's plan in each, each rival priced against auto's plan of its own race."""
    from mf_memopt.auto.race import RaceKilled

    plans = [(name, auto_plan(TINY, budget=budget * MiB, runtime="cpu", margin=0.0))
             for name, budget in (("mine", 60), ("b", 50), ("c", 52), ("d", 54))]
    speed = {"mine": 1.0, "b": 0.9, "c": 1.1, "d": 1.2}
    raced, lines = [], []

    def name_of(config: Path) -> str:
        return next(name for name, plan in plans if plan.text == config.read_text())

    def race(configs: list[Path], work: Path) -> list[tuple[float, ...]]:
        if len(configs) > 3:
            raise RaceKilled("racing 4 plans was killed (SIGKILL)")
        raced.append([name_of(config) for config in configs])
        slow = 0.5 * (len(raced) == 2)                  # the second race slower throughout
        return [(speed[name] + slow,) * 5 for name in raced[-1]]

    winner, timed = measure_time(plans, 60 * MiB, tmp_path, lines.append, peak=lambda config, work: 49 * MiB,
                                 race=race, known={0: 59 * MiB})
    assert raced == [["mine", "b", "c"], ["mine", "d"]] and plans[winner][0] == "b"
    assert {item.name: item.time_s for item in timed} == pytest.approx(
        {"mine": 1.0, "b": 0.9, "c": 1.1, "d": 1.0 * 1.7 / 1.5})         # d against mine's step of its own race
    assert any("a race of 4 plans was killed" in line for line in lines)

    def never(configs: list[Path], work: Path) -> list[tuple[float, ...]]:
        raise RaceKilled("killed")

    with pytest.raises(RaceKilled):
        measure_time(plans[:2], 60 * MiB, tmp_path, lines.append, peak=lambda config, work: 49 * MiB,
                     race=never, known={0: 59 * MiB})
