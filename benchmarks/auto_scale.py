"""`auto`'s planning time by model size: the per-stage search is a small integer programme whose size grows with the
positions' kinds of options (ascend) or linearly with the layers (cpu), not combinatorially.

* ascend, the Llama2-7B planning config (2 stages) at 128 to 10,000 layers: a budget above the no-recompute peak
  (the empty plan, answered without a search) and a budget halfway between full recompute and nothing (where the
  plan must recompute). Targets: 1024 layers under 10 s, 10,000 layers under 60 s (or one line).
* cpu, the tiny mcore Qwen3 at 4 to 48 layers, halfway between its full-recompute and no-recompute peaks (the
  layer-by-layer search refused every mcore cpu config; the whole-plan fallback stopped at 5000 plans, 24 layers).

    python benchmarks/auto_scale.py
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import load_note, print_table  # noqa: E402
from mf_memopt.auto import InfeasibleBudget, auto_plan  # noqa: E402

ASCEND = REPO / "configs/planning/llama2_7b_swap_pp2.yaml"
CPU = REPO / "configs/qwen3_tiny.yaml"
LIMITS = {1024: 10.0, 10000: 60.0}


def main() -> int:
    print(load_note())
    ok = True
    with tempfile.TemporaryDirectory(prefix="mf_memopt_scale_") as tmp:
        rows = []
        for layers in (128, 512, 1024, 4096, 10000):
            path = _with(ASCEND, "num_layers", layers, Path(tmp))
            empty_s, probe = _timed(lambda path=path: auto_plan(path, budget=1 << 60))
            low = max(stage.peak.peak for stage in probe.references["full recompute"].stages)
            high = max(stage.peak.peak for stage in probe.references["nothing"].stages)
            mid_s, plan = _timed(lambda path=path: auto_plan(path, budget=(low + high) // 2))
            limit = LIMITS.get(layers)
            within = "" if limit is None else ("yes" if max(empty_s, mid_s) < limit else "NO")
            ok = ok and within != "NO"
            rows.append([layers, f"{empty_s:.2f}", f"{mid_s:.2f}", plan.family, f"{plan.priced_s * 1e3:.1f}",
                         "yes" if plan.fits else "NO", within])
        print_table("ascend: the Llama2-7B planning config (2 stages), planning time by layers",
                    ["layers", "empty plan (s)", "mid budget (s)", "family", "added time (ms)", "fits", "in time"],
                    rows)
        rows = []
        for layers in (4, 12, 24, 48):
            path = _with(CPU, "num_hidden_layers", layers, Path(tmp))
            probe = auto_plan(path, budget=1 << 40, runtime="cpu")
            low = max(stage.peak.peak for stage in probe.references["full recompute"].stages)
            high = max(stage.peak.peak for stage in probe.references["nothing"].stages)
            try:
                seconds, plan = _timed(lambda path=path: auto_plan(path, budget=(low + high) // 2, runtime="cpu"))
                rows.append([layers, f"{seconds:.2f}", f"{plan.priced_s * 1e3:.3f}", "yes" if plan.fits else "NO",
                             "; ".join(plan.repairs) or "-"])
            except InfeasibleBudget:
                rows.append([layers, "-", "infeasible", "-", "-"])
                ok = False
        print_table("cpu: the tiny mcore Qwen3, planning time by layers (halfway between full recompute and nothing, "
                    "the 5% margin held)", ["layers", "seconds", "added time (ms)", "fits", "repairs"], rows)
    return 0 if ok else 1


def _with(config: Path, key: str, layers: int, directory: Path) -> Path:
    path = directory / f"{config.stem}_{layers}.yaml"
    path.write_text(re.sub(rf"{key}: *\d+", f"{key}: {layers}", config.read_text(), count=1))
    return path


def _timed(work):
    began = time.perf_counter()
    result = work()
    return time.perf_counter() - began, result


if __name__ == "__main__":
    sys.exit(main())
