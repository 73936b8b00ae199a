"""Running the project's launcher from a test: its command line, a quiet environment that imports this checkout's
package, and a finished run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "llama_tiny.yaml"


def launcher_command(*args: str) -> list[str]:
    """`run_mindformer_memopt.py --config ARGS...`."""
    return [sys.executable, str(ROOT / "run_mindformer_memopt.py"), "--config", *args]


def launcher_env() -> dict:
    return {**os.environ, "GLOG_v": "3", "PYTHONPATH": str(ROOT)}


def launch(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(launcher_command(*args), cwd=cwd, env=launcher_env(), capture_output=True, text=True,
                          timeout=600)
