"""benchmarks/compress_quality.py: the schedule, the evaluation steps and the paired statistics (no training)."""

from __future__ import annotations

import pytest

from benchmarks.compress_quality import (eval_steps, final_steps, held_out_windows, interval, paired, pairing_check,
                                         schedule, verdicts, windows)


def test_the_schedule_warms_up_then_decays_to_a_tenth():
    rates = schedule(100, 1e-3)
    assert rates[0] == pytest.approx(1e-4) and rates[9] == pytest.approx(1e-3)
    assert max(rates) == pytest.approx(1e-3) and rates[-1] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(rates[9:], rates[10:]))


def test_evaluations_start_at_step_0_and_end_with_the_final_ones():
    assert eval_steps(300, 50, 3, 10) == [0, 50, 100, 150, 200, 250, 280, 290, 300]
    assert final_steps(300, 3, 10) == [280, 290, 300]


def test_windows_and_held_out_windows():
    text = bytes(range(1, 101))
    assert windows(text, 10).shape == (10, 10)
    assert windows(b"\0a" * 5, 5)[0, 0] == 32                 # a zero byte is not a padding id
    held = held_out_windows(text, 10, 4)
    assert [row[0] for row in held] == [1, 31, 61, 91]        # spread over the text, first and last included
    with pytest.raises(SystemExit):
        held_out_windows(text, 10, 11)


def _run(*losses):
    return {"held_out": [[step, loss] for step, loss in zip((0, 280, 290, 300), losses)]}


RUNS = {"baseline": {0: _run(5.0, 2.0, 2.0, 2.0), 1: _run(5.1, 3.0, 3.0, 3.0)},
        "int8": {0: _run(5.0, 2.01, 2.01, 2.01), 1: _run(5.1, 3.0, 3.0, 3.03)},
        "null": {0: _run(5.0000001, 2.0, 2.0, 2.0), 1: _run(5.1, 3.0, 3.0, 3.0)}}


def test_differences_are_paired_by_seed():
    rows = {(row["method"], row["step"]): row for row in paired(RUNS, [280, 290, 300])}
    assert rows[("int8", 300)]["diffs"] == pytest.approx([0.5, 1.0])
    assert rows[("int8", "final")]["diffs"] == pytest.approx([0.5, 1 / 3])
    assert rows[("int8", "final")]["baseline_mean"] == pytest.approx(2.5)
    low, high = rows[("int8", 300)]["diff_ci95"]
    assert low < 0.75 < high and high - low == pytest.approx(2 * 12.706 * 0.25)
    assert interval([0.4]) == (0.4, 0.4)


def test_the_pairing_check_ignores_the_null_control_and_sees_a_mismatch():
    assert pairing_check(RUNS) == []
    broken = {**RUNS, "int4": {0: _run(5.2, 2.0, 2.0, 2.0)}}
    assert len(pairing_check(broken)) == 1


def test_verdicts_read_the_interval_against_the_target():
    tight = {"baseline": {seed: _run(5.0, 2.0, 2.0, 2.0) for seed in range(3)},
             "int8": {seed: _run(5.0, 2.002, 2.002, 2.002 + seed * 1e-4) for seed in range(3)},
             "int4": {seed: _run(5.0, 2.1, 2.1, 2.1 + seed * 1e-3) for seed in range(3)}}
    lines = verdicts(paired(tight, [280, 290, 300]))
    assert "within ±0.5% (95%)" in lines[0] and "no worse than +0.5% at 95%: yes" in lines[0]
    assert "outside ±1.0% (95%)" in lines[1] and "not shown" in lines[1]
