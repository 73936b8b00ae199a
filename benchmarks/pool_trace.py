"""What the CPU memory pool holds at its peak: a config trained one step with MindSpore's allocation log.

The estimator's CPU terms come from these traces. With `GLOG_v=2 MS_SUBMODULE_LOG_v="{PRE_ACT:1,ME:0}"`
MindSpore logs every pool allocation (`IncreaseNewRefCount] Op:Alloc memory ...`, with the tensor's
node, shape, dtype, size and address) and every release (`FreeMemory] ... ptr:`). Replaying them in
time order gives the live bytes at every moment (each block rounded up to the pool's 512 bytes); the
largest is the pool's "peak used mem" to the byte (printed next to MindSpore's own whole-MiB figure).
The replay itself is `mf_memopt.estimate.pool_log`, which `estimate --measure --exact` uses too.

    python benchmarks/pool_trace.py CONFIG [--top N] [--min-bytes B] [--keep-log FILE]
    python benchmarks/pool_trace.py --log FILE     # replay a log kept earlier

It prints the peak, the node whose allocation reached it, and the live tensors grouped by node
(layer indices and op numbers folded), largest first. The debug log of one step is 20-150 MB and
the run takes 2-3 times as long as a plain one; the peak is the same as without the log.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_PREFIX = "Default/network-DataOrderWrapperCell/network-LlamaForCausalLM/"


def replay(lines):
    """The package's replay (`mf_memopt.estimate.pool_log`), with this tool's exit on a log without allocations."""
    from mf_memopt.estimate.pool_log import NoAllocations
    from mf_memopt.estimate.pool_log import replay as pool_replay

    try:
        return pool_replay(lines)
    except NoAllocations as error:
        raise SystemExit(f"pool_trace: {error}") from error


def grouped(peak) -> list[tuple[int, int, str]]:
    """(bytes, count, key) per node kind, largest first; layer indices and op numbers folded."""
    sizes, counts = collections.Counter(), collections.Counter()
    for block in peak.live:
        node = re.sub(r"-op\d+", "", re.sub(r"layers-CellList/\d+", "layers/N", block.node)).replace(_PREFIX, "")
        key = f"{node} {block.shape} {block.dtype}"
        sizes[key] += block.size
        counts[key] += 1
    return [(size, counts[key], key) for key, size in sizes.most_common()]


def trace(config: Path, log: Path) -> None:
    """Train `config` one step as `estimate --measure` does (the package's one child runner), with the allocation
    log on, into `log`."""
    from mf_memopt.runs.runner import ChildFailed, train, yaml_dataset

    with tempfile.TemporaryDirectory(prefix="mf_memopt_trace_") as tmp:
        work = Path(tmp)
        try:
            train(config.resolve(), steps=1, work=work, dataset=yaml_dataset(config, work / "output"),
                  allocation_log=True, log_file=log, timeout=None)
        except ChildFailed as error:
            raise SystemExit(f"pool_trace: {error}") from error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", type=Path, help="training YAML (trained one step on CPU)")
    parser.add_argument("--log", type=Path, help="replay this allocation log instead of training")
    parser.add_argument("--keep-log", type=Path, help="where to keep the allocation log of the run")
    parser.add_argument("--top", type=int, default=25, help="node kinds to print (default 25)")
    parser.add_argument("--min-bytes", type=int, default=0, help="leave out smaller node kinds")
    args = parser.parse_args(argv)
    if (args.config is None) == (args.log is None):
        parser.error("give a CONFIG to train or --log FILE to replay")
    if args.log is not None:
        if not args.log.is_file():
            parser.error(f"--log {args.log}: no such file")
        peak = replay(args.log.open(errors="replace"))
    else:
        with tempfile.TemporaryDirectory(prefix="mf_memopt_trace_log_") as tmp:
            log = args.keep_log or Path(tmp) / "pool.log"
            trace(args.config, log)
            peak = replay(log.open(errors="replace"))
    reported = f"; MindSpore reports {peak.reported_mib} MiB" if peak.reported_mib is not None else ""
    print(f"peak {peak.bytes / 2**20:.2f} MiB (replayed{reported}), reached by {peak.reached_by.node} "
          f"{peak.reached_by.shape} {peak.reached_by.dtype}")
    for size, count, key in grouped(peak)[:args.top]:
        if size >= args.min_bytes:
            print(f"{size / 2**20:10.3f} MiB  x{count:<4} {key}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
