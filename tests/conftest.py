import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("GLOG_v", "3")  # keep MindSpore quiet
# tests/helpers/ is on sys.path: its modules (fakes.py, launching.py, ...) are imported by name. tests/ is not, so
# that none of its folders (helpers/, children/, unit/, mindspore/, ...) becomes an import name. The scripts in
# tests/children/ are run by path; those that import a helper put tests/helpers/ on their own sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))
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


# Seconds each of the slowest files took in a full run (`pytest --durations=0`, summed per file, 2026-11-27; for a
# file trimmed since, what its remaining runs took; refresh when the order drifts far from it). Under xdist a file is
# one unit of work (--dist loadfile) and the workers take units in collection order, so the suite collects these
# first, longest first, and ends on the short files: in xdist's default order (the files with the most tests first,
# so the unit files), one worker sat idle for the last two to three minutes while the other finished a long file.
# Only the order changes; every file still runs.
SECONDS = {
    "mindspore/test_compare_e2e.py": 251, "mindspore/test_moe_launcher.py": 245, "mindspore/test_verify_e2e.py": 235,
    "mindspore/test_router_additions.py": 180, "mindspore/test_mcore_launcher.py": 145, "mindspore/test_msrun.py": 139,
    "mindspore/test_damage.py": 111, "mindspore/test_launcher_e2e.py": 95, "mindspore/test_launcher_faults.py": 87,
    "mindspore/test_verify_pipeline.py": 86, "mindspore/test_auto_time.py": 86, "mindspore/test_step_forms.py": 80,
    "mindspore/test_pipeline_precompile.py": 65, "mindspore/test_estimate_mixed.py": 38,
    "mindspore/test_differential_twins.py": 38, "mindspore/test_mcore_kernels.py": 31,
    "mindspore/test_stand_in_patterns.py": 30, "mindspore/test_codec.py": 19, "mindspore/test_output_claim.py": 19,
    "mindspore/test_differential_moe.py": 17, "mindspore/test_balance.py": 16, "mindspore/test_verify_stop.py": 33,
    "mindspore/test_differential_mcore.py": 16, "mindspore/test_compress_model.py": 15, "unit/test_fuzz.py": 13,
}
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    """The slowest files first, longest first (SECONDS); the rest after them in their collected order."""
    def seconds(item) -> int:
        path = Path(item.path).resolve()
        return SECONDS.get(path.relative_to(TESTS).as_posix(), 0) if TESTS in path.parents else 0

    items.sort(key=lambda item: -seconds(item))      # stable: a file's own tests keep their order


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
