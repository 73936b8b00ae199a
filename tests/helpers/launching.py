"""Running the project's launcher from a test: its command line, a quiet environment that imports this checkout's
package, and a finished run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "llama_tiny.yaml"
POOL_LOG = {"GLOG_v": "2", "MS_SUBMODULE_LOG_v": "{PRE_ACT:1}"}     # MindSpore prints its memory-pool peak at exit


def launcher_command(config: str | Path, *args: str) -> list[str]:
    """`run_mindformer_memopt.py --config CONFIG ARGS...`."""
    return [sys.executable, str(ROOT / "run_mindformer_memopt.py"), "--config", str(config), *args]


def launcher_env(**extra: str) -> dict:
    """This process's environment with MindSpore quiet (GLOG_v 3) and this checkout's package on PYTHONPATH (in place
    of any other), then `extra` over it (POOL_LOG, for one)."""
    return {**os.environ, "GLOG_v": "3", "PYTHONPATH": str(ROOT), **extra}


def launch(config: str | Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(launcher_command(config, *args), cwd=cwd, env=launcher_env(), capture_output=True,
                          text=True, timeout=600)
