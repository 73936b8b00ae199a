"""The process environment a run reads and sets, in one place: who this process is under msrun, where
MindFormers writes its logs, and the lazy_inline switch.

msrun starts each worker with `MS_WORKER_NUM`, `MS_NODE_ID` and `RANK_ID` (equal to the node id,
except in MindSpore's dry runs); the rank is read in that one order everywhere (log prefix,
`worker_<id>` directories).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

LOGGER = logging.getLogger("mf_memopt")
LAZY_INLINE_NO_PIPELINE = "ENABLE_LAZY_INLINE_NO_PIPELINE"
MINDFORMERS_OUTPUT = "LOCAL_DEFAULT_PATH"      # MindFormers writes its logs under it (else ./output)
MINDFORMERS_LOG = "LOG_MF_PATH"                # ... or exactly here


def rank() -> str:
    """This worker's rank under msrun or a rank table ("0" alone)."""
    return os.environ.get("RANK_ID") or os.environ.get("MS_NODE_ID") or "0"


def process_role() -> str:
    """This process's part in a job: `rank<r>` for a worker, `scheduler` for msrun's scheduler, which runs the
    same script with RANK_ID 0 beside worker 0."""
    return "scheduler" if os.environ.get("MS_ROLE") == "MS_SCHED" else f"rank{rank()}"


def msrun_workers() -> int:
    """How many workers msrun started (1 outside msrun)."""
    return int(os.environ.get("MS_WORKER_NUM", "1") or 1)


def under_launcher() -> bool:
    """Whether a distributed launcher (msrun, or a rank table) started this process."""
    return "MS_ROLE" in os.environ or "RANK_TABLE_FILE" in os.environ


def point_mindformers_at(output: Path) -> None:
    """MindFormers writes its logs under this directory instead of ./output of the working directory."""
    os.environ[MINDFORMERS_OUTPUT] = str(output)


def mindformers_log_dir() -> str:
    """The directory MindFormers' logger writes to (its own rule: LOG_MF_PATH, else <output>/log)."""
    root = os.path.realpath(os.path.expanduser(os.getenv(MINDFORMERS_OUTPUT, "./output")))
    return os.path.expanduser(os.getenv(MINDFORMERS_LOG, os.path.join(root, "log")))


def lazy_inline_without_pipeline() -> bool:
    """Turn on lazy_inline for a job without pipeline stages; True if it was off until now."""
    if os.environ.get(LAZY_INLINE_NO_PIPELINE) == "1":
        return False
    os.environ[LAZY_INLINE_NO_PIPELINE] = "1"
    return True


def configure_logging(level: int = logging.INFO) -> None:
    """Print mf_memopt's lines to stdout (msrun captures it per worker), tagged with the rank."""
    if any(getattr(handler, "_mf_memopt", False) for handler in LOGGER.handlers):
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(
        f"%(asctime)s - mf_memopt[rank {rank()}][%(filename)s:%(lineno)d] - %(levelname)s - %(message)s"))
    handler._mf_memopt = True  # type: ignore[attr-defined]
    LOGGER.addHandler(handler)
    LOGGER.setLevel(level)
    LOGGER.propagate = False
