"""`auto`'s time side (issue 37): the measured step-time profile, the plan space, pricing by the profile, the
exhaustive search where the layer search cannot express the peak, and `--measure`'s time loop (with a stand-in
for training; tests/mindspore/test_auto_time.py trains for real)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mf_memopt.auto import auto_plan
from mf_memopt.auto.choices import KEEP, Choice
from mf_memopt.auto.measure import measure_time
from mf_memopt.auto.space import PlanSpace, stage_assignments
from mf_memopt.auto.timing import (STEP_LINE, STEPS, WARMUP, TimeTable, Trained, _step_times, fastest, load_table,
                                   monotone, profile, save_table, shape_key)
from mf_memopt.config.source import load_source

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs/llama_tiny.yaml"
QWEN3 = ROOT / "configs/qwen3_tiny.yaml"
MiB = 2**20
FULL = Choice(full=True)
ATTENTION = Choice(select=("attention",))
MLP = Choice(select=("feed_forward",))
BOTH = Choice(select=("feed_forward", "attention"))     # the family's order of its cells


@pytest.fixture(autouse=True)
def _no_user_profile(tmp_path, monkeypatch):
    """A time profile cached in the user's directory would change what the cpu plans cost: none here."""
    monkeypatch.setenv("MF_MEMOPT_CACHE", str(tmp_path / "cache"))


def _table(config: Path, added: dict[str, float]) -> TimeTable:
    return TimeTable(key=shape_key(load_source(config)), layers=4, base_s=1.0, added_s={"keep": 0.0, **added},
                     source="test profile")


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


def test_profile_measures_each_choice_against_keep():
    """Each choice's added time per layer is (its fastest run's step time - keep's) / layers, never negative; a
    run's step time is the lower quartile of its timed steps; the runs are interleaved over the choices."""
    order = []
    step = {"keep": 1.00, "full recompute": 1.40, "recompute attention": 1.30, "recompute feed_forward": 0.98,
            "recompute feed_forward+attention": 1.36}
    slower = {"keep": 0.2, "recompute attention": 0.1}        # the second run of these is slower: not counted

    def uniform(choice: Choice) -> str:
        return choice.name

    def train(config: Path, work: Path, steps: int) -> Trained:
        name = config.read_text()
        order.append(name)
        base = step[name] + (slower.get(name, 0.0) if order.count(name) == 2 else 0.0)
        # the lower quartile of 5 steps is the second fastest: one fast outlier is not the run's time
        return Trained(peak_bytes=1, step_s=(base + 0.5, base - 0.3, base, base + 0.01, base + 0.02))

    table = profile(load_source(TINY), 4, uniform, [KEEP, ATTENTION, MLP, BOTH, FULL], runs=2, train=train)
    assert table.base_s == pytest.approx(1.0)
    assert table.seconds(FULL) == pytest.approx(0.10) and table.seconds(ATTENTION) == pytest.approx(0.075)
    assert table.seconds(MLP) == 0.0 and table.seconds(KEEP) == 0.0        # faster than keep: free, not negative
    assert table.seconds(BOTH) == pytest.approx(0.09)
    assert order[:5] == order[5:] and len(set(order[:5])) == 5             # run 1 of every choice, then run 2
    assert table.samples["keep"] == pytest.approx([1.0, 1.2])
    # the runs' spread per layer: the median over the choices of (slowest run - fastest run), / layers
    assert table.noise_s == pytest.approx(0.0) and "lower quartile of wall time" in table.source


def test_a_larger_recompute_never_costs_less_than_the_cells_it_contains():
    """Noise can time both cells below one cell alone; both cells are then charged at least that cell's time.
    Full recompute is measured as it runs (one segment per layer): it may cost less than both cells."""
    choices = {"keep": KEEP, "a": ATTENTION, "f": MLP, "b": BOTH, "full": FULL}
    fixed = monotone({"keep": 0.0, "a": 0.05, "f": 0.02, "b": 0.03, "full": 0.04}, choices)
    assert fixed == {"keep": 0.0, "a": 0.05, "f": 0.02, "b": 0.05, "full": 0.04}


def test_a_run_is_timed_by_the_lower_quartile_of_its_steps_after_the_warm_up():
    steps = (0.9, 0.5, 0.4, 0.41, 0.6, 0.42)
    assert Trained(peak_bytes=1, step_s=steps).time_s == 0.41                # sorted: 0.4 0.41 0.42 ... (index 1)
    assert fastest([Trained(peak_bytes=1, step_s=steps), Trained(peak_bytes=1, step_s=(0.45,))]) == 0.41


def test_profile_cache_is_per_model_shape(tmp_path):
    """The cache is keyed by the model's shape: another plan section hits it, another hidden size misses it; a
    broken file counts as no profile."""
    source = load_source(TINY)
    table = _table(TINY, {"full recompute": 0.1})
    path = save_table(table, source, tmp_path)
    assert load_table(source, tmp_path) == table
    replanned = TINY.read_text().replace("'feed_forward': True", "'attention': True")
    assert load_table(load_source({**yaml.safe_load(replanned)}), tmp_path) == table
    bigger = yaml.safe_load(TINY.read_text())
    bigger["model"]["model_config"]["hidden_size"] = 512
    assert load_table(load_source(bigger), tmp_path) is None
    path.write_text("{not json")
    assert load_table(source, tmp_path) is None


def test_step_clock_lines_are_parsed_after_the_warm_up_steps():
    """The first WARMUP steps are not timed (the compile, then the run settling); a run too short to have later
    steps is timed from its second step."""
    out = "\n".join(f"mf_memopt stepclock: step {n} wall_ms {100 * n}.5 cpu_ms {10 * n}.25" for n in range(1, 8))
    assert STEP_LINE.findall(out)[0] == ("1", "100.5", "10.25")
    assert WARMUP == 5 and STEPS - WARMUP >= 10
    assert _step_times(out) == ((0.6005, 0.7005), (0.06025, 0.07025))
    short = "\n".join(out.splitlines()[:3])
    assert _step_times(short) == ((0.2005, 0.3005), (0.02025, 0.03025))


def test_a_measured_profile_decides_the_plan_where_flops_decide_otherwise():
    """The issue's case: the FLOP model finds recomputing the attention cheap, so auto recomputes it; measured,
    the attention (memory-bound softmax and scores on CPU) costs as much as the whole layer, and the plan
    changes to the one the profile makes fastest, which the exhaustive search over the space confirms."""
    flops = auto_plan(TINY, budget=60 * MiB, runtime="cpu", margin=0.0)
    assert "FLOP model" in flops.time_source
    flop_choices = {option.choice for option in flops.stages[0].options}
    table = _table(TINY, {"full recompute": 0.096, "recompute attention": 0.12, "recompute feed_forward": 0.05,
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
    table = _table(TINY, {"full recompute": 0.09, "recompute attention": 0.07, "recompute feed_forward": 0.03,
                          "recompute feed_forward+attention": 0.095})
    space = PlanSpace(TINY, times=table)
    ranked = space.ranked(budget_mib * MiB)
    plan = auto_plan(TINY, budget=budget_mib * MiB, runtime="cpu", margin=0.0, times=table)
    assert plan.priced_s == pytest.approx(ranked[0].priced_s)
    assert max(stage.peak.peak for stage in plan.estimate.stages) <= budget_mib * MiB


def test_mcore_cpu_plans_come_from_the_whole_space():
    """The mcore Qwen3's cpu peak has a term the layer search cannot express (its first layer's attention
    backward depends on later layers' choices); auto then estimates every count-form plan whole instead of
    stopping with a traceback, and writes the fastest that fits."""
    plan = auto_plan(QWEN3, budget=50 * MiB, runtime="cpu", margin=0.0)
    space = PlanSpace(QWEN3)
    best = space.ranked(50 * MiB)[0]
    assert plan.repairs and "count-form plans were estimated whole" in plan.repairs[0]
    assert tuple(option.choice for option in plan.stages[0].options) == best.choices
    assert max(stage.peak.peak for stage in plan.estimate.stages) <= 50 * MiB


def test_time_loop_keeps_the_fastest_plan_that_holds_the_budget(tmp_path):
    """Plans are trained interleaved; a faster plan over the budget is not kept; the first run of the first plan
    is the peak round's."""
    plans = [(name, auto_plan(TINY, budget=budget * MiB, runtime="cpu", margin=0.0))
             for name, budget in (("a", 60), ("b", 50), ("c", 70))]
    measured = {"a": (59 * MiB, 1.2), "b": (49 * MiB, 1.1), "c": (71 * MiB, 0.9)}
    order = []

    def train(config: Path, work: Path) -> Trained:
        name = next(name for name, plan in plans if plan.text == config.read_text())
        order.append(name)
        peak, seconds = measured[name]
        return Trained(peak_bytes=peak, step_s=(seconds + 0.5 * (order.count(name) == 2),))   # run 2 slower

    first = {0: Trained(peak_bytes=59 * MiB, step_s=(1.2,))}
    winner, timed = measure_time(plans, 60 * MiB, tmp_path, lambda line: None, runs=2, train=train, first=first)
    assert plans[winner][0] == "b" and order == ["b", "c", "a", "b", "c"]
    assert [item.times for item in timed] == [(1.2, 1.2), (1.1, 1.6), (0.9, 1.4)]      # a plan: its fastest run
    assert [item.time_s for item in timed] == [1.2, 1.1, 0.9]


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
