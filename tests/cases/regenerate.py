"""Rewrite every golden case's plan.json and peak.json after an intended change: `python tests/cases/regenerate.py`.

Review the diff before committing it: the golden files are the expected behaviour. A new case is a folder
tests/cases/<family>/<case>/ with its config.yaml, or a case.json naming a config shipped under configs/
(tests/helpers/golden_cases.py).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))  # golden_cases.py
from golden_cases import ROOT, cases, dump, family_of_case, peaks_of, plan_of  # noqa: E402

for case in cases():
    if family_of_case(case) != case.family:
        sys.exit(f"{case.name}: the config is a {family_of_case(case)} model: move the case to "
                 f"tests/cases/{family_of_case(case)}/")
    for name, value in (("plan.json", plan_of(case)), ("peak.json", peaks_of(case))):
        (case.folder / name).write_text(dump(value))
        print((case.folder / name).relative_to(ROOT))
