"""The package's architecture, held by tests: stages import only what is before them, and what depends on the
model lives in `mf_memopt/models/`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mf_memopt"
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
                                              "mf_memopt.models.mcore.checks", "mf_memopt.models.mcore.keys"]
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
