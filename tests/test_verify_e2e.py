"""`python -m mf_memopt verify` on every shipped config that trains: the compiled graph agrees with the plan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.mindspore

ROOT = Path(__file__).resolve().parents[1]
TRAINABLE = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "configs").glob("*.yaml"))


@cache
def _verify(config: str, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GLOG_v": "3", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mf_memopt", "verify", config, "--json", *flags], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def _result(config: str) -> dict:
    done = _verify(config)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("config", TRAINABLE)
def test_compiled_graph_agrees_with_the_plan(config):
    result = _result(config)
    assert result["agrees"] is True
    assert [layer["disagreements"] for layer in result["layers"]] == [[]] * 4


def test_recomputed_cells_are_copied_into_the_backward():
    layers = _result("configs/llama_tiny.yaml")["layers"]
    assert [layer["recompute"] for layer in layers] == [["feed_forward"]] * 4
    assert all(layer["copies"] > 0 and not layer["notes"] for layer in layers)


def test_offloads_carry_the_configured_prefetch():
    layers = _result("configs/swap_case3_op_swap.yaml")["layers"]
    assert [sorted(layer["offloaded"]) for layer in layers] == [["20"], ["15", "20"], ["15", "20"], ["10"]]


def test_marks_that_save_nothing_are_reported():
    layers = _result("configs/recompute_select_patterns.yaml")["layers"]
    assert "feed_forward.mul is marked for recompute, but the graph has no recompute copy of it (its consumers " \
           "keep their own inputs): it saves no memory here" in layers[3]["notes"]


def test_rule_2_conflict_is_found_and_strict_fails_on_it():
    layers = _result("configs/swap_rule2_example.yaml")["layers"]
    assert [layer["rule2"] for layer in layers] == [
        [], ["layer 1: the offload of attention_norm.mul2 does not take effect: its output is consumed by "
             "recomputed attention.wq (Reshape) (rule 2)"], [], []]
    assert _verify("configs/swap_rule2_example.yaml", "--strict").returncode == 1
