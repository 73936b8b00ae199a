"""The tiny twins of tests/helpers/pipeline_twins.py, each built twice on CPU with MindFormers' own stage assignment:
by MindFormers applying the YAML's sections itself (its `LayerSetting`), and by mf_memopt (MindFormers' handling off,
then `apply_plan`). Prints, as one JSON line, {twin: {"theirs": marks, "ours": marks, "stages": {layer: the stage
mf_memopt's plan gives it}}}.

    python tests/children/twin_builds.py [TWIN ...]

Run by tests/mindspore/test_differential_twins.py in a child process (a build switches MindFormers' process-wide
context).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("GLOG_v", "3")
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1] / "helpers")]

from pipeline_twins import LEGACY, MCORE, VARIANTS, build, marks, shipped, twin  # noqa: E402


def run(name: str, work: str) -> dict:
    from mf_memopt import apply_plan, load_plan
    from mf_memopt.runtime.build import unshare_layers

    data = twin(shipped(name), work)
    theirs = marks(build(data, ours=False))
    network = build(data, ours=True)
    plan = load_plan(data)
    unshare_layers(network, plan.family, lambda line: print(line, file=sys.stderr))   # as mf_memopt's build does
    apply_plan(plan, network, device_target="CPU")
    return {"theirs": theirs, "ours": marks(network), "stages": {layer.layer: layer.stage for layer in plan.layers}}


def main(argv: list[str]) -> int:
    work = tempfile.TemporaryDirectory(prefix="mf_memopt_twins_")
    results = {}
    for name in argv or [*MCORE, *VARIANTS, *LEGACY]:
        print(f"twin {name}", file=sys.stderr)
        results[name] = run(name, work.name)
    work.cleanup()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
