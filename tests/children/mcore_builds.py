"""A tiny Qwen3 and a tiny TeleChat3 (tests/helpers/mcore_differential.py), each built twice per case: by MindFormers
applying the YAML's sections itself (its mcore `LayerSetting`), and by mf_memopt (MindFormers' handling off, then
`apply_plan`). Prints, as one JSON line, {model: {case: {"theirs": marks, "ours": marks, "off": marks of the model
before mf_memopt applied its plan}}}.

    python tests/children/mcore_builds.py [--model qwen3|telechat3|qwen3_moe] [CASE ...]
    python tests/children/mcore_builds.py --params MODEL ...     # trainable parameters per layer, as built

Run by tests/mindspore/test_differential_mcore.py, test_differential_moe.py and test_estimate_params.py in a child
process (an mcore build switches MindFormers' process-wide context).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("GLOG_v", "3")
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1] / "helpers")]

from mcore_differential import ALL_CASES, CASES, build, document, marks, parameters  # noqa: E402


def main(argv: list[str]) -> int:
    from mf_memopt import apply_plan, load_plan

    if argv[:1] == ["--params"]:
        work = tempfile.TemporaryDirectory(prefix="mf_memopt_params_")
        print(json.dumps({model: {"config": document({}, model, work.name),
                                  "built": parameters(build(document({}, model, work.name), ours=True))}
                          for model in argv[1:]}))
        work.cleanup()
        return 0

    models = ["qwen3", "telechat3"]
    if argv[:1] == ["--model"]:
        models, argv = [argv[1]], argv[2:]
    results: dict[str, dict] = {}
    work = tempfile.TemporaryDirectory(prefix="mf_memopt_differential_")
    for model in models:
        for name in argv or list(CASES):
            data = document(ALL_CASES[name], model, work.name)
            try:
                theirs = marks(build(data, ours=False))
            except Exception as error:      # MindFormers' own handling failed: recorded, ours still runs
                theirs = {"error": f"{type(error).__name__}: {error}"}
            network = build(data, ours=True)
            off = marks(network)
            apply_plan(load_plan(data), network, device_target="CPU")
            results.setdefault(model, {})[name] = {"theirs": theirs, "ours": marks(network), "off": off}
    work.cleanup()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
