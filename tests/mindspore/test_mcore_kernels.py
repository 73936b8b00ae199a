"""The CPU stand-ins of an mcore model against independent NumPy references (`mcore_kernel_check.py`, run in a
child process): the kernels alone, flash attention in every layout, sparse mode and head grouping, a whole Qwen3
self-attention built by MindFormers (GQA, QK norm, rotary, causal mask), a whole Qwen3-MoE `mlp` (router,
top-k, experts, aux loss), DeepSeek-V3's MoE block (group-limited sigmoid routing with an expert bias, shared
expert) and its multi-latent attention, forward and gradients."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path



CHECK = Path(__file__).resolve().parents[1] / "children" / "mcore_kernel_check.py"


def test_the_stand_ins_agree_with_numpy():
    done = subprocess.run([sys.executable, str(CHECK)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "GLOG_v": "3"}, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == 74
    assert any(name.startswith("Qwen3 self-attention: d q_layernorm") for name in results)
    assert any(name.startswith("Qwen3-MoE layer: d router.weight") for name in results)
    assert any(name.startswith("DeepSeek-V3 MoE block: d shared_experts") for name in results)
    assert any(name.startswith("DeepSeek-V3 multi-latent attention: d input") for name in results)
    failed = {name: error for name, (error, tolerance) in results.items() if not error <= tolerance}
    assert not failed, failed
