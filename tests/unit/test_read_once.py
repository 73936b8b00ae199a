"""A command reads its config once: the loader (`config/load.py`: `load_document`, `read_document`, `load_plan`,
`plan_source` over `config/source.py`'s `load_source`) is called only at the entry points below, and every later
stage takes the `Document` (or its plan, layout, family) it is handed."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "mf_memopt"
READERS = frozenset({"load_source", "read_document", "load_document", "load_plan", "plan_source"})

ENTRIES = {
    # the loader itself
    "config/load.py:load_document": {"load_source", "read_document"},
    "config/load.py:load_plan": {"load_document"},
    "config/load.py:plan_source": {"read_document"},
    # the commands, where each reads its config(s)
    "cli.py:_validate": {"load_plan"},
    "cli.py:_plan": {"load_plan"},
    "cli.py:_verify": {"load_document"},
    "cli.py:_estimate": {"load_document"},
    "cli.py:_auto": {"load_document"},
    "cli.py:_check_data": {"load_document"},
    "runtime/launch.py:_run": {"load_document"},
    "runtime/launch.py:_preflight_only": {"load_document"},
    "runtime/data.py:main": {"load_document"},
    "verify/precompile.py:main": {"load_document"},
    "auto/race.py:main": {"load_document"},
    "runs/check.py:measure_and_compare": {"load_document"},
    "compare/engine.py:compare_configs": {"load_document"},
    "auto/balance.py:balance_plan": {"load_document"},
    # library functions a user or a test calls with a path: read at their top; a Document passes through
    "estimate/core.py:estimate_config": {"load_document"},
    "runs/check.py:device_runtime": {"load_document"},
    "verify/check.py:verify": {"load_document"},
    "runtime/session.py:prepare": {"load_document"},
    "auto/planner.py:auto_plan": {"load_document"},
    "auto/space.py:PlanSpace.__init__": {"load_document"},
    "auto/space.py:cached_or_profiled": {"load_document"},
    "runs/runner.py:yaml_dataset": {"load_document"},
    # YAMLs `auto` writes in memory (its plans, its offsets), each a new document
    "estimate/core.py:estimate_source": {"load_document"},
    "auto/context.py:PlanContext.read": {"load_document"},
    "auto/balance.py:_Pipeline.read": {"load_document"},
}


def reads(source: str) -> dict[str, set[str]]:
    """`{scope: names}`: the loader functions `source` calls, by the function (or method) that calls them, however
    they were imported (`from ..config.load import load_document as read` is seen as load_document)."""
    tree = ast.parse(source)
    spelled = {name: name for name in READERS}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            spelled.update({alias.asname: alias.name for alias in node.names if alias.asname and alias.name in READERS})
    found: dict[str, set[str]] = {}

    def walk(node: ast.AST, scope: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                walk(child, (*scope, child.name))
                continue
            if isinstance(child, ast.Call):
                name = getattr(child.func, "id", None) or getattr(child.func, "attr", None)
                if name in spelled:
                    found.setdefault(".".join(scope) or "<module>", set()).add(spelled[name])
            walk(child, scope)

    walk(tree, ())
    return found


def package_reads() -> dict[str, set[str]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for scope, names in reads(path.read_text()).items():
            found[f"{path.relative_to(PACKAGE).as_posix()}:{scope}"] = names
    return found


def violations(found: dict[str, set[str]]) -> dict[str, set[str]]:
    """The places that call the loader without being an entry point for what they call."""
    return {place: names for place, names in found.items() if not names <= ENTRIES.get(place, set())}


def test_the_config_is_read_only_by_the_loader_and_at_the_entry_points():
    found = package_reads()
    assert violations(found) == {}, "a stage reads the config again: take the Document its command read"
    assert sorted(set(ENTRIES) - set(found)) == [], "entry points that no longer read: drop them from ENTRIES"


def test_the_check_would_see_a_stage_that_reads_the_config_again():
    stage = ("from ..config.source import load_source\nfrom ..config.load import read_document as document_of\n"
             "class Stage:\n    def run(self, path):\n        return document_of(load_source(path)).family\n"
             "def other(document):\n    return document.family\n")
    assert reads(stage) == {"Stage.run": {"load_source", "read_document"}}
    assert reads("from .. import config\nplan = config.load.load_plan('x.yaml')\n") == {"<module>": {"load_plan"}}
    assert violations({"estimate/spec.py:Stage.run": {"read_document"}, "cli.py:_plan": {"load_plan"},
                       "cli.py:_verify": {"load_document", "load_source"}}) == {
        "estimate/spec.py:Stage.run": {"read_document"}, "cli.py:_verify": {"load_document", "load_source"}}


CONFIG = PACKAGE.parent / "configs" / "llama_tiny.yaml"


@pytest.fixture
def counted(monkeypatch):
    """How often each YAML file is read, and how often a family is chosen, while a test runs."""
    from mf_memopt.config import load
    from mf_memopt.document import source

    counts = {"reads": Counter(), "families": 0}
    read_bytes, family_of = source.read_bytes, load.family_of

    def counting_read(path):
        counts["reads"][Path(path).name] += 1
        return read_bytes(path)

    def counting_family(document):
        counts["families"] += 1
        return family_of(document)

    monkeypatch.setattr(source, "read_bytes", counting_read)
    monkeypatch.setattr(load, "family_of", counting_family)
    return counts


def test_estimate_measure_reads_the_config_once_and_hands_the_document_to_the_child_runner(counted, monkeypatch,
                                                                                          capsys):
    """Before: the device's runtime, the estimate, the backend check and the child's dataset each read it."""
    from mf_memopt.cli import main
    from mf_memopt.config.load import Document
    from mf_memopt.runs import check
    from mf_memopt.runs.measure import Measurement

    def measured(config, **_):
        assert isinstance(config, Document) and config.source.file == str(CONFIG)
        return Measurement(config=str(CONFIG), runtime="cpu", steps=1, peak_bytes=100 * 2**20, source="test")

    monkeypatch.setattr(check, "measure_peak", measured)
    assert main(["estimate", str(CONFIG), "--measure"]) == 0
    assert "100 MiB" in capsys.readouterr().out
    assert counted["reads"] == {"llama_tiny.yaml": 1} and counted["families"] == 1


def test_auto_reads_the_config_once(counted, tmp_path, monkeypatch):
    """Before: the time-profile lookup and the planner each read it (the planner's own YAMLs are held in memory)."""
    from mf_memopt.cli import main

    monkeypatch.setenv("MF_MEMOPT_CACHE", str(tmp_path))      # no cached time profile
    assert main(["auto", str(CONFIG), "--runtime", "cpu", "--device-memory", "200MiB", "--json"]) == 0
    assert counted["reads"] == {"llama_tiny.yaml": 1}


def test_compare_chooses_each_configs_family_once(counted, tmp_path, capsys):
    """Before: planning, the check that only the plan changed and the list of changes each chose it again."""
    from mf_memopt.cli import main

    candidate = tmp_path / "seed.yaml"
    candidate.write_text(CONFIG.read_text().replace("seed: 0", "seed: 7"))
    assert "seed: 0" in CONFIG.read_text()
    assert main(["compare", str(CONFIG), str(candidate)]) == 2
    assert ": seed: differs from the base: 7 here" in capsys.readouterr().err
    assert counted["reads"] == {"llama_tiny.yaml": 1, "seed.yaml": 1} and counted["families"] == 2


def test_the_launchers_preflight_reads_the_config_once(counted):
    from mf_memopt.runtime.launch import main

    assert main(["--config", str(CONFIG), "--preflight"]) == 0
    assert counted["reads"] == {"llama_tiny.yaml": 1} and counted["families"] == 1
