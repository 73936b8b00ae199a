"""The estimator's parameter counts equal the models MindFormers builds: every decoder layer of a tiny Qwen3,
Qwen3-MoE and DeepSeek-V3 (a dense first layer, multi-latent attention, MoE layers with a shared expert), its MTP
layer, and the rest (embedding, final norm, output head). Counted from the built networks' trainable parameters
(`mcore_builds.py --params`, in a child process: an mcore build switches MindFormers' process-wide context)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from mf_memopt.document.source import load_source
from mf_memopt.estimate.memory import stage_parameters
from mf_memopt.estimate.family import read_spec
from mf_memopt.estimate.spec import ParallelSpec
from mf_memopt.family import family_of


ROOT = Path(__file__).resolve().parents[2]
MODELS = ("qwen3", "qwen3_moe", "deepseek3")


@cache
def _built() -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "children" / "mcore_builds.py"), "--params", *MODELS],
                          capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "GLOG_v": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", MODELS)
def test_each_layer_and_the_model_level_parameters_equal_the_built_models(name):
    built = _built()[name]
    source = load_source(built["config"])
    issues: list = []
    model, _, _ = read_spec(source, family_of(source), issues)
    assert not issues
    counts = built["built"]
    layers = sorted(key for key in counts if key.startswith("layers."))
    assert [counts[key] for key in layers] == [model.layer_model(index).layer_params
                                               for index in range(model.num_layers)]
    mtp = [counts[key] for key in sorted(counts) if key.startswith("mtp.layers.")]
    assert mtp == [model.mtp_params] * model.mtp_layers
    assert sum(counts.values()) == stage_parameters(model, ParallelSpec(), range(model.num_layers), True, True)
    if name == "deepseek3":     # the dense first layer and the MoE layers differ, and the spec says how
        assert model.mla and model.dense_layers == 1 and model.mtp_layers == 1
        assert counts["layers.0"] < counts["layers.1"]
