"""The package's architecture, held by tests: every folder is a floor, a module imports only its own folder and
lower floors (counting imports inside functions and under `TYPE_CHECKING`), no import circle, no module takes
another's private name, and what depends on the model lives in `mf_memopt/models/`."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "mf_memopt"
LATER_STAGES = ("mf_memopt.apply", "mf_memopt.runtime", "mf_memopt.runs", "mf_memopt.verify", "mf_memopt.estimate",
                "mf_memopt.auto", "mf_memopt.models")
MINDSPORE = ("mindspore", "mindformers")


def _imported_by(modules: list[str]) -> list[str]:
    """Every module in sys.modules after importing `modules` in a fresh interpreter."""
    code = ("import importlib, sys\n"
            f"for name in {modules!r}: importlib.import_module(name)\n"
            "print('\\n'.join(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.split()


def _modules(package: str) -> list[str]:
    folder = PACKAGE.joinpath(*package.split(".")[1:])
    return [f"{package}.{path.stem}" for path in sorted(folder.glob("*.py")) if path.stem != "__init__"]


def test_the_config_stage_imports_no_later_stage_and_no_mindspore():
    loaded = _imported_by(_modules("mf_memopt.config") + _modules("mf_memopt.document") + ["mf_memopt.family"])
    assert [name for name in loaded if name.startswith(LATER_STAGES) or name.split(".")[0] in MINDSPORE] == []


def test_every_config_and_family_module_imports_first_in_a_fresh_interpreter():
    """No import circle: each module of the config stage and the families' config parts (none imports MindSpore),
    imported before anything else (an entry point may start anywhere; `benchmarks/balance.py` started at
    config.plan and met one)."""
    modules = _modules("mf_memopt.config") + _modules("mf_memopt.document") + [
                                              "mf_memopt.family", "mf_memopt.models", "mf_memopt.models.llama",
                                              "mf_memopt.models.llama.checks", "mf_memopt.models.mcore",
                                              "mf_memopt.models.mcore.checks", "mf_memopt.models.mcore.keys",
                                              "mf_memopt.models.llama.parts", "mf_memopt.models.mcore.parts"]
    code = ("import importlib, subprocess, sys\n"
            f"failed = [name for name in {modules!r} if subprocess.run([sys.executable, '-c', 'import ' + name],"
            " capture_output=True).returncode]\n"
            "print(' '.join(failed))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == []


@pytest.mark.parametrize("command_modules", [["mf_memopt.cli", "mf_memopt.estimate", "mf_memopt.auto",
                                             "mf_memopt.auto.balance", "mf_memopt.auto.balance_report"]])
def test_validate_plan_estimate_and_auto_run_without_mindspore(command_modules):
    loaded = _imported_by(command_modules)
    assert [name for name in loaded if name.split(".")[0] in MINDSPORE] == []


# Cells, keys and classes of MindFormers' legacy Llama: they belong to mf_memopt/models/llama only.
LEGACY_NAMES = re.compile(
    r"\b(feed_forward|attention_norm|ffn_norm|w1|w2|w3|wq|wk|wv|wo|LlamaConfig|LlamaForCausalLM|LLamaDecodeLayer|"
    r"LLamaAttention|LlamaFeedForward|n_kv_heads|num_heads|use_flash_attention|fused_rms_norm|use_rope_slice|"
    r"layernorm_compute_type|softmax_compute_type|param_init_type|rotary_dtype|layers-CellList)\b")


def test_no_module_outside_models_names_a_legacy_llama_cell_key_or_class():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "models":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = LEGACY_NAMES.search(line)
            if match:
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {match.group(0)}")
    assert found == []


def test_the_check_above_would_see_a_legacy_name():
    assert LEGACY_NAMES.search("DEFAULT_SELECT = (r'feed_forward\\.mul',)")
    assert LEGACY_NAMES.search('model_config.get("num_heads")')
    assert not LEGACY_NAMES.search("num_layers = layout.num_layers")


# The floors, lowest first: each a set of folders of mf_memopt/ ("" is the package root). A module imports only
# modules of its own folder or of folders on a lower floor (never a sibling folder on its own floor), counting
# imports inside functions and under `if TYPE_CHECKING:` (a type a module names is a dependency of its design).
# The registry in family/ names each family's package by a string that is imported on first use: the one
# reference that runs up, on purpose, so that a family is a plug-in and no stage imports one.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("document",),                      # the YAML as read, its errors, its cell trees and pattern rules
    ("family",),                        # what a family is: plain data and the registry
    ("compress",),                      # the codec, and the compression contract a family fills in
    ("config",),                        # validate, normalise, plan; the rules contract
    ("estimate", "apply"),              # predict memory and time; mark a built model (the backend contract)
    ("models", "models.llama", "models.mcore"),   # the families' implementations of the contracts
    ("runtime",),                       # build, train and supervise (the launcher)
    ("runs",),                          # start the launcher as a child: train, compile, race, measure
    ("verify", "auto", "compare"),      # the commands' engines
    ("",),                              # the command line and the package's public names
)
"""Floor of every folder, by its path below mf_memopt/."""


def folder_of(module: str) -> str:
    """The folder of a module, dotted below mf_memopt ("" for the root): a package's own folder for its
    `__init__`."""
    path = PACKAGE.parent.joinpath(*module.split("."))
    parts = module.split(".")[1:]
    return ".".join(parts if path.is_dir() else parts[:-1])


def floor_of(folder: str) -> int:
    for floor, folders in enumerate(FLOORS):
        if folder in folders:
            return floor
    raise AssertionError(f"mf_memopt/{folder.replace('.', '/')} is on no floor: add it to FLOORS")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_imports(source: str, module: str, is_package: bool) -> list[tuple[str, str]]:
    """(module, name) for every mf_memopt import in `source`, anywhere in it: inside functions and under
    `if TYPE_CHECKING:` too. `from .x import y` imports `x.y` when that is a module (name ""), else `x` (name `y`);
    `import a.b` imports `a.b` (name "")."""
    tree = ast.parse(source)
    base = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names if alias.name.split(".")[0] == "mf_memopt"]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                target = ".".join([*base[:len(base) - node.level + 1], *([node.module] if node.module else [])])
            if target.split(".")[0] != "mf_memopt":
                continue
            for alias in node.names:
                submodule = _submodule(target, alias.name)
                found.append((submodule, "" if submodule != target else alias.name))
    return found


def _submodule(package: str, name: str) -> str:
    folder = PACKAGE.parent.joinpath(*package.split("."), name)
    return f"{package}.{name}" if folder.is_dir() or folder.with_suffix(".py").is_file() else package


def import_graph() -> dict[str, set[str]]:
    """Every module of the package and the package modules it imports."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        targets = {target for target, _ in package_imports(path.read_text(), module, path.stem == "__init__")}
        graph[module] = targets - {module}
    return graph


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a module on a higher floor, or of a sibling folder on the module's own floor."""
    found = []
    for module, targets in sorted(graph.items()):
        here = folder_of(module)
        for target in sorted(targets):
            there = folder_of(target)
            if there != here and floor_of(there) >= floor_of(here):
                way = "up" if floor_of(there) > floor_of(here) else "sideways"
                found.append(f"{module} (floor {floor_of(here)}) imports {target} (floor {floor_of(there)}): {way}")
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each strongly connected set of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            members = []
            while not members or members[-1] != node:
                members.append(stack.pop())
            if len(members) > 1:
                found.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def private_imports() -> list[str]:
    """Imports that take another module's `_private` name: `from .x import _y`, or `x._y` after `from . import x`
    or `import a.x as x`."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text())
        imports = package_imports(path.read_text(), module, path.stem == "__init__")
        found += [f"{module} imports {target}.{name}" for target, name in imports
                  if name.startswith("_") and not name.startswith("__") and target != module]
        aliases = _module_aliases(tree, module, path.stem == "__init__")
        found += [f"{module} reads {aliases[node.value.id]}.{node.attr}" for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id in aliases and node.attr.startswith("_") and not node.attr.startswith("__")]
    return sorted(set(found))


def _module_aliases(tree: ast.Module, module: str, is_package: bool) -> dict[str, str]:
    """The names a source binds to package modules (`from . import x`, `import mf_memopt.a.x as x`)."""
    aliases = {}
    base = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                target = ".".join([*base[:len(base) - node.level + 1], *([node.module] if node.module else [])])
            for alias in node.names:
                submodule = _submodule(target, alias.name) if target.startswith("mf_memopt") else ""
                if submodule and submodule != target:
                    aliases[alias.asname or alias.name] = submodule
        elif isinstance(node, ast.Import):
            aliases.update({alias.asname: alias.name for alias in node.names
                            if alias.asname and alias.name.startswith("mf_memopt.")})
    return aliases


def test_every_folder_is_on_a_floor_and_no_module_imports_up_or_sideways():
    assert upward_imports(import_graph()) == []


def test_the_package_has_no_import_circle():
    assert circles(import_graph()) == []


def test_no_module_takes_another_modules_private_name():
    assert private_imports() == []


def test_the_floor_check_would_see_an_upward_import_inside_a_function_or_for_a_type():
    imported = package_imports("def f():\n    from ...apply import cells\n", "mf_memopt.models.llama.cpu_memory", False)
    assert imported == [("mf_memopt.apply.cells", "")]
    typed = package_imports("if TYPE_CHECKING:\n    from ..estimate.spec import ModelSpec\n",
                            "mf_memopt.config.plan", False)
    assert typed == [("mf_memopt.estimate.spec", "ModelSpec")]
    assert upward_imports({"mf_memopt.config.plan": {"mf_memopt.estimate.spec"}}) == [
        "mf_memopt.config.plan (floor 3) imports mf_memopt.estimate.spec (floor 4): up"]
    assert upward_imports({"mf_memopt.estimate.core": {"mf_memopt.apply.cells"}}) == [
        "mf_memopt.estimate.core (floor 4) imports mf_memopt.apply.cells (floor 4): sideways"]
    assert upward_imports({"mf_memopt.runs.runner": {"mf_memopt.runtime.data", "mf_memopt.runs.child"}}) == []


def test_the_circle_check_would_see_a_circle_through_a_type_only_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_private_check_would_see_a_private_name_taken():
    tree = ast.parse("from . import planner\nx = planner._header()\n")
    assert _module_aliases(tree, "mf_memopt.auto.space", False) == {"planner": "mf_memopt.auto.planner"}
    assert package_imports("from .planner import _header, AutoPlan\n", "mf_memopt.auto.space", False) == [
        ("mf_memopt.auto.planner", "_header"), ("mf_memopt.auto.planner", "AutoPlan")]
    assert package_imports("from .checks import _DEFAULT_COMM\n", "mf_memopt.models.llama", True) == [
        ("mf_memopt.models.llama.checks", "_DEFAULT_COMM")]


def test_no_package_dodges_an_import_circle_with_a_lazy_getattr():
    """Only the package root imports its public names on first use, so that `import mf_memopt.config` does not
    import apply (and with it MindSpore's cells)."""
    found = [_module_name(path) for path in sorted(PACKAGE.rglob("__init__.py")) if path.parent != PACKAGE
             and any(isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
                     for node in ast.parse(path.read_text()).body)]
    assert found == []


def family_choices(source: str) -> int:
    """How many times `source` calls `family_of` (by any spelling: `family_of(...)`, `models.family_of(...)`)."""
    return sum(1 for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
               and (getattr(node.func, "id", None) == "family_of" or getattr(node.func, "attr", None) == "family_of"))


def test_the_family_is_chosen_only_by_the_loader():
    """`config.load` chooses the family of a YAML; every later stage takes it from the document or the plan."""
    calls = {_module_name(path): family_choices(path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))}
    assert {module: count for module, count in calls.items() if count} == {"mf_memopt.config.load": 1}


def test_the_family_check_would_see_a_choice_made_elsewhere():
    assert family_choices("from ..models import family_of\nfamily = family_of(source)\n") == 1
    assert family_choices("from .. import models\nview = models.family_of(base).view(base)[0]\n") == 1
    assert family_choices("from ..models import family_of\n") == 0


def test_compare_trains_through_the_runner_and_imports_nothing_of_estimate():
    found = [f"{_module_name(path)} imports {target}" for path in sorted((PACKAGE / "compare").rglob("*.py"))
             for target, _ in package_imports(path.read_text(), _module_name(path), path.stem == "__init__")
             if target.startswith("mf_memopt.estimate")]
    assert found == []


LONGEST_FUNCTION = 60


def long_functions(source: str) -> list[tuple[str, int]]:
    """(name, lines) of every function in `source` longer than LONGEST_FUNCTION lines, `def` to its last line."""
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > LONGEST_FUNCTION]


def test_no_function_in_the_package_is_over_sixty_lines():
    found = [f"{path.relative_to(PACKAGE)}: {name} ({lines} lines)" for path in sorted(PACKAGE.rglob("*.py"))
             for name, lines in long_functions(path.read_text())]
    assert found == []


def test_the_length_check_would_see_a_long_function_nested_or_not():
    body = "".join(f"    x{index} = {index}\n" for index in range(60))
    assert long_functions(f"def short():\n{body[:-len('    x59 = 59')-1]}\n") == []
    assert long_functions(f"def long():\n{body}") == [("long", 61)]
    assert long_functions("class A:\n    def method(self):\n" + body.replace("    ", "        ")) == [("method", 61)]
