"""Golden cases (tests/cases/<family>/<case>/): the plan `plan --json` prints and the stage peaks
`estimate --json` prints, checked against reviewed files.

After an intended change, run `python tests/cases/regenerate.py` and review the diff; a new case is a new folder
(tests/helpers/golden_cases.py says what it holds).
"""

from __future__ import annotations

import json

import pytest

from golden_cases import CASES, REGENERATE, ROOT, cases, family_of_case, peaks_of, plan_of

SHIPPED = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "configs").rglob("*.yaml"))


def _differences(committed, now, where: str = "") -> list[str]:
    """Where two JSON values differ, as `key.key[index]: committed X, now Y` (the first few)."""
    if isinstance(committed, dict) and isinstance(now, dict):
        return [line for key in sorted(set(committed) | set(now), key=str)
                for line in _differences(committed.get(key, "(absent)"), now.get(key, "(absent)"),
                                         f"{where}.{key}" if where else str(key))]
    if isinstance(committed, list) and isinstance(now, list) and len(committed) == len(now):
        return [line for index, (old, new) in enumerate(zip(committed, now))
                for line in _differences(old, new, f"{where}[{index}]")]
    return [] if committed == now else [f"{where or '(whole file)'}: committed {json.dumps(committed)[:200]}, "
                                        f"now {json.dumps(now)[:200]}"]


@pytest.mark.parametrize("case", cases(), ids=lambda case: case.name)
def test_plan_and_peaks_match_the_case(case):
    problems = [] if family_of_case(case) == case.family else [
        f"the config is a {family_of_case(case)} model, the case is under {case.family}/"]
    for name, now in (("plan.json", plan_of(case)), ("peak.json", peaks_of(case))):
        path = case.folder / name
        committed = json.loads(path.read_text()) if path.exists() else "(no file)"
        problems += [f"{name} {line}" for line in _differences(committed, now)[:5]]
    assert not problems, (f"golden case {case.name} ({case.config}): " + "; ".join(problems) +
                          f". After an intended change: {REGENERATE}, and review the diff")


def test_every_shipped_config_is_a_case_and_every_case_has_its_files():
    named = sorted(case.config for case in cases() if case.config.startswith("configs/"))
    assert named == SHIPPED, f"shipped configs without a case: {sorted(set(SHIPPED) - set(named))}; " \
                             f"cases naming no shipped config: {sorted(set(named) - set(SHIPPED))}"
    incomplete = [f"{case.name}: no {name}" for case in cases() for name in ("plan.json", "peak.json")
                  if not (case.folder / name).exists()]
    strays = [path.relative_to(CASES).as_posix() for path in sorted(CASES.glob("*/*"))
              if path.is_dir() and path not in {case.folder for case in cases()}]
    strays = [f"{folder}: no config.yaml or case.json" for folder in strays]
    assert not incomplete and not strays, "; ".join(incomplete + strays) + ": each case folder holds its config " \
        f"(config.yaml, or case.json naming a shipped one), plan.json and peak.json ({REGENERATE} writes the last two)"
