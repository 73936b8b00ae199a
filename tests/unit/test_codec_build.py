"""Building the fused codec's kernels, and the choice between them and the graph-operator reference (no MindSpore).

The library is cached under the cache directory by a digest of the source, flags, compiler and target; two
processes that build at once both end with the one whole file; without a compiler, or off the CPU backend, or when
asked, the reference codec runs and the reason is given; `MF_MEMOPT_CODEC=fused` that cannot run is an error.
"""

from __future__ import annotations

import multiprocessing
import re
import shutil
from pathlib import Path

import pytest

from mf_memopt.compress import build as kernels
from mf_memopt.compress.choice import CODEC_ENV, choose_codec

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (the fused codec's compiler)")


@pytest.fixture
def fresh(monkeypatch):
    """No library found yet in this process, and the choice read from the environment as the test sets it."""
    kernels.library.cache_clear()
    monkeypatch.delenv(CODEC_ENV, raising=False)
    yield
    kernels.library.cache_clear()


@needs_gxx
def test_the_cache_key_follows_the_source_the_flags_and_the_compiler(tmp_path):
    cxx = kernels.compiler()
    key, version = kernels.build_key(cxx)
    assert kernels.build_key(cxx) == (key, version) and version.startswith("g++")
    changed = tmp_path / "codec.cpp"
    changed.write_text(kernels.SOURCE.read_text() + "\n// changed\n")
    assert kernels.build_key(cxx, source=changed)[0] != key
    assert kernels.build_key(cxx, flags=(*kernels.FLAGS, "-DMF_OTHER"))[0] != key
    assert kernels.build_key(cxx, flags=tuple(flag for flag in kernels.FLAGS if flag != "-march=native"))[0] != key


def _build(directory: str) -> tuple[str, bool]:
    found = kernels.build(directory=Path(directory))
    return str(found.path), found.built


@needs_gxx
def test_two_processes_building_at_once_both_get_the_whole_library_and_later_calls_reuse_it(tmp_path):
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.map(_build, [str(tmp_path)] * 2)
    assert results[0][0] == results[1][0]
    assert sorted(path.name for path in (tmp_path / "kernels").iterdir()) == [results[0][0].rpartition("/")[2]]
    assert kernels.build(directory=tmp_path).built is False          # found in the cache, not built again
    assert kernels.build(directory=tmp_path).path.stat().st_size > 10_000


def test_without_a_compiler_the_reference_codec_runs_and_says_why(fresh, monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-mf")
    choice = choose_codec("CPU")
    assert (choice.name, choice.library) == ("reference", None)
    assert choice.line() == ("Compression codec: reference (MindSpore graph operators) for int8/int4/int2: the fused "
                             "kernels did not build: no C++ compiler: `no-such-compiler-mf` is not on PATH (set CXX "
                             "to one)")
    monkeypatch.setenv(CODEC_ENV, "fused")
    with pytest.raises(ValueError, match=re.escape("MF_MEMOPT_CODEC=fused, but the fused codec cannot run: the fused "
                                                   "kernels did not build: no C++ compiler")):
        choose_codec("CPU")


def test_off_the_cpu_backend_or_when_asked_the_reference_codec_runs(fresh, monkeypatch):
    assert choose_codec("Ascend").reason == "the fused kernels are CPU code and the backend is Ascend"
    monkeypatch.setenv(CODEC_ENV, "reference")
    assert choose_codec("CPU").line() == ("Compression codec: reference (MindSpore graph operators) for "
                                           "int8/int4/int2: MF_MEMOPT_CODEC=reference")
    monkeypatch.setenv(CODEC_ENV, "fast")
    with pytest.raises(ValueError, match="MF_MEMOPT_CODEC='fast': expected one of auto, fused, reference"):
        choose_codec("CPU")


@needs_gxx
def test_a_compile_error_is_reported_with_the_compiler_message_and_leaves_no_file(tmp_path):
    broken = tmp_path / "broken.cpp"
    broken.write_text(kernels.SOURCE.read_text().replace("namespace {", "namespace {\nsyntax error here;", 1))
    with pytest.raises(kernels.BuildError, match="exited with 1: .*error"):
        kernels.build(directory=tmp_path / "cache", source=broken)
    assert list((tmp_path / "cache" / "kernels").iterdir()) == []
