import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("GLOG_v", "3")  # keep MindSpore quiet
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/: the shared helpers (fakes.py, children.py, ...)
# benchmarks/ (the sweep's records) is imported from the checkout; appended, so that an installed mf_memopt
# (scripts/check_wheel.sh runs this tier against the wheel) is not shadowed by the checkout's.
sys.path.append(str(Path(__file__).resolve().parents[1]))

# The tier is the folder: everything under tests/mindspore/ compiles, trains or imports MindSpore/MindFormers.
MINDSPORE_TIER = Path(__file__).resolve().parent / "mindspore"


def _in_mindspore_tier(path: Path) -> bool:
    return path == MINDSPORE_TIER or MINDSPORE_TIER in path.parents


def pytest_ignore_collect(collection_path, config):
    """Under `-m "not mindspore"`, tests/mindspore/ is not collected at all (none of its modules is imported), so
    the fast tier runs where MindSpore (and its NumPy) is not installed."""
    if "not mindspore" in (config.option.markexpr or "") and _in_mindspore_tier(Path(collection_path).resolve()):
        return True
    return None


def pytest_itemcollected(item):
    """Every test under tests/mindspore/ carries the `mindspore` marker (what `-m` selects on)."""
    if _in_mindspore_tier(Path(item.path).resolve()):
        item.add_marker(pytest.mark.mindspore)


@pytest.fixture(autouse=True, scope="module")
def _mindformers_legacy_default_per_module():
    """MindFormers keeps one context per process (a singleton that ignores later configs) and reads `use_legacy`
    from it wherever it builds or lays out a model: a module that built an mcore model (use_legacy False) would
    leave MindFormers' legacy Llama path off for the next module the same pytest worker runs. Each module starts
    from MindFormers' default (no use_legacy: legacy)."""
    yield
    context = sys.modules.get("mindformers.core.context.build_context")
    instance = context.MFContextOperator.get_mf_ctx_instance() if context is not None else None
    if instance is not None:
        instance.use_legacy = None      # what MFContextOperator.get_context reads; None means legacy
