"""Build the fused codec's C++ kernels (`kernels/codec.cpp`) on first use, cached (no MindSpore needed here).

The library is built by the C++ compiler (`CXX`, else `g++`) for the CPU it runs on (`-march=native`) and kept
in the cache directory (`MF_MEMOPT_CACHE`, else `~/.cache/mf_memopt`) under `kernels/`, named by a digest of the
source, the flags, the compiler's version and the target it resolves `-march=native` to: a change of any of
them builds a new library, and a machine of another CPU sharing the cache builds its own. Two processes that
build at once each compile to a file of their own and rename it into place, so neither reads a half-written one.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("kernels") / "codec.cpp"
# -ffp-contract=off: no fused multiply-add, so that every float32 rounding is the reference codec's.
FLAGS = ("-std=c++17", "-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-shared", "-fPIC")
SYMBOLS = ("CompressInt8", "CompressInt4", "CompressInt2", "RestoreInt8", "RestoreInt4", "RestoreInt2",
           "CodecNoise", "CodecPhilox", "CodecCopy")
TIMEOUT = 300     # seconds for one compile (about 2 s here)


class BuildError(RuntimeError):
    """The kernels could not be built or loaded; the message says why."""


@dataclass(frozen=True, slots=True)
class Library:
    path: Path
    compiler: str        # the compiler's first version line
    built: bool          # False when it came from the cache


def cache_dir() -> Path:
    root = os.environ.get("MF_MEMOPT_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "mf_memopt"


def compiler() -> str:
    """The compiler's path; BuildError when there is none."""
    name = os.environ.get("CXX", "g++")
    found = shutil.which(name)
    if found is None:
        raise BuildError(f"no C++ compiler: `{name}` is not on PATH (set CXX to one)")
    return found


def build_key(cxx: str, flags: tuple[str, ...] = FLAGS, source: Path = SOURCE) -> tuple[str, str]:
    """(digest, the compiler's version line) of what decides the library's bytes."""
    version = _run([cxx, "--version"]).splitlines()[0]
    target = _run([cxx, *[flag for flag in flags if flag.startswith("-m")], "-Q", "--help=target"])
    digest = hashlib.sha256()
    for part in (source.read_bytes(), " ".join(flags).encode(), version.encode(), target.encode()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:20], version


def build(flags: tuple[str, ...] = FLAGS, directory: Path | None = None, source: Path = SOURCE) -> Library:
    """The library for these flags, built now if the cache does not hold it; BuildError says why not."""
    cxx = compiler()
    key, version = build_key(cxx, flags, source)
    folder = (directory or cache_dir()) / "kernels"
    path = folder / f"codec-{key}.so"
    built = False
    if not path.is_file():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=folder, prefix=f"{path.name}.", suffix=".tmp")
        except OSError as error:
            raise BuildError(f"cannot write the kernel cache {folder}: {error}") from error
        os.close(handle)
        try:
            _run([cxx, *flags, "-o", temporary, str(source)])
            os.replace(temporary, path)      # atomic: a process building beside this one finds a whole file
            built = True
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
    _check_symbols(path)
    return Library(path=path, compiler=version, built=built)


@functools.cache
def library() -> Library:
    """The library for this process (built or found once)."""
    return build()


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BuildError(f"`{' '.join(command)}` failed: {error}") from error
    if done.returncode != 0:
        raise BuildError(f"`{' '.join(command)}` exited with {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def _check_symbols(path: Path) -> None:
    try:
        loaded = ctypes.CDLL(str(path))
    except OSError as error:
        raise BuildError(f"cannot load {path}: {error}") from error
    missing = [name for name in SYMBOLS if not hasattr(loaded, name)]
    if missing:
        raise BuildError(f"{path} lacks {', '.join(missing)}")
