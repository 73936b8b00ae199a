"""Rewrite the golden plans after an intended change: `python tests/golden/regenerate.py`.

Review the diff before committing it: the golden files are the expected behaviour.
"""

import json
from pathlib import Path

from mf_memopt import load_plan

ROOT = Path(__file__).resolve().parents[2]

for config in sorted((ROOT / "configs").rglob("*.yaml")):
    golden = ROOT / "tests" / "golden" / (config.relative_to(ROOT / "configs").as_posix().replace("/", "__")[:-5] + ".json")
    golden.write_text(json.dumps(load_plan(config.relative_to(ROOT)).to_dict(), indent=2, sort_keys=True) + "\n")
    print(golden.relative_to(ROOT))
