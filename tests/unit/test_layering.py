"""The package's architecture, held by tests: stages import only what is before them, and what depends on the
model lives in `mf_memopt/models/`."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "mf_memopt"
LATER_STAGES = ("mf_memopt.apply", "mf_memopt.runtime", "mf_memopt.verify", "mf_memopt.estimate", "mf_memopt.auto")
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
    loaded = _imported_by(_modules("mf_memopt.config") + ["mf_memopt.models"])
    assert [name for name in loaded if name.startswith(LATER_STAGES) or name.split(".")[0] in MINDSPORE] == []


def test_every_config_and_family_module_imports_first_in_a_fresh_interpreter():
    """No import circle: each module of the config stage and the families' config parts (none imports MindSpore),
    imported before anything else (an entry point may start anywhere; `benchmarks/balance.py` started at
    config.plan and met one)."""
    modules = _modules("mf_memopt.config") + ["mf_memopt.models", "mf_memopt.models.family", "mf_memopt.models.llama",
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


# The floors, lowest first. A module imports only modules of its own floor or lower ones.
DOCUMENT, SEAM, STAGES, FAMILIES, TOOLS = 1, 2, 3, 4, 5
FLOORS = (
    # the document: the YAML as read, its errors, its inheritance, the cell trees the patterns are matched against
    ({"mf_memopt.config." + name for name in ("errors", "source", "reading", "yamlload", "inherit", "tree",
                                              "patterns")}, DOCUMENT),
    # the family seam: the interface every family fills in, and the registry
    ({"mf_memopt.models", "mf_memopt.models.family", "mf_memopt.models.compression"}, SEAM),
    # `estimate --measure` trains in a child: a tool that lives beside the estimate it checks
    ({"mf_memopt.estimate.check", "mf_memopt.estimate.measure"}, TOOLS),
    ({"mf_memopt.config", "mf_memopt.estimate", "mf_memopt.apply", "mf_memopt.compress"}, STAGES),
    ({"mf_memopt.models"}, FAMILIES),
    ({"mf_memopt"}, TOOLS),
)


def floor_of(module: str) -> int:
    """The floor of a module: the first entry that names it or a package above it (`mf_memopt.models` names the
    seam's package itself, and every family below it)."""
    for names, floor in FLOORS:
        exact = floor in (DOCUMENT, SEAM) or names == {"mf_memopt.estimate.check", "mf_memopt.estimate.measure"}
        if module in names or (not exact and any(module.startswith(name + ".") for name in names)):
            return floor
    raise AssertionError(f"{module} is on no floor")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_only(tree: ast.Module) -> set[int]:
    """The imports under `if TYPE_CHECKING:`: they name types for the checker and never run."""
    return {id(node) for block in ast.walk(tree) if isinstance(block, ast.If) and isinstance(block.test, ast.Name)
            and block.test.id == "TYPE_CHECKING" for statement in block.body for node in ast.walk(statement)}


def package_imports(source: str, module: str, is_package: bool) -> list[str]:
    """The mf_memopt modules `source` imports, anywhere in it (inside functions too), but for type-only imports.
    `from .x import y` counts as importing `x.y` when that is a module, else `x`."""
    tree = ast.parse(source)
    skipped = _type_only(tree)
    base = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "mf_memopt"]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                target = ".".join([*base[:len(base) - node.level + 1], *([node.module] if node.module else [])])
            if target.split(".")[0] != "mf_memopt":
                continue
            found += [_submodule(target, alias.name) for alias in node.names]
    return found


def _submodule(package: str, name: str) -> str:
    folder = PACKAGE.parent.joinpath(*package.split("."), name)
    return f"{package}.{name}" if folder.is_dir() or folder.with_suffix(".py").is_file() else package


def upward_imports() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        for target in package_imports(path.read_text(), module, path.stem == "__init__"):
            if floor_of(target) > floor_of(module):
                found.append(f"{module} (floor {floor_of(module)}) imports {target} (floor {floor_of(target)})")
    return found


def test_no_module_imports_from_a_higher_floor():
    assert upward_imports() == []


def test_the_floor_check_would_see_an_upward_import_inside_a_function():
    source = "def f():\n    from ...apply import cells\n"
    imported = package_imports(source, "mf_memopt.models.llama.cpu_attention", is_package=False)
    assert imported == ["mf_memopt.apply.cells"]
    assert floor_of(imported[0]) == STAGES < floor_of("mf_memopt.models.llama.cpu_attention") == FAMILIES
    config_to_family = package_imports("from ..models.llama import LLAMA\n", "mf_memopt.config.load", False)
    assert [floor_of(target) for target in config_to_family] == [FAMILIES] and floor_of("mf_memopt.config.load") == 3
    assert package_imports("if TYPE_CHECKING:\n    from ..plan import Plan\n", "mf_memopt.models.family", False) == []
    assert floor_of("mf_memopt.document.errors") == DOCUMENT and floor_of("mf_memopt.models.family") == SEAM
    assert floor_of("mf_memopt.compare.runs") == floor_of("mf_memopt.estimate.measure") == TOOLS


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
             for target in package_imports(path.read_text(), _module_name(path), path.stem == "__init__")
             if target.startswith("mf_memopt.estimate")]
    assert found == []
