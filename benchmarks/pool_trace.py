"""What the CPU memory pool holds at its peak: a config trained one step with MindSpore's allocation log.

The estimator's CPU terms come from these traces. With `GLOG_v=2 MS_SUBMODULE_LOG_v="{PRE_ACT:1,ME:0}"`
MindSpore logs every pool allocation (`IncreaseNewRefCount] Op:Alloc memory ...`, with the tensor's
node, shape, dtype, size and address) and every release (`FreeMemory] ... ptr:`). Replaying them in
time order gives the live bytes at every moment; the largest is the pool's "peak used mem" to within
the pool's rounding (the reconstruction is printed next to MindSpore's own figure).

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
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_ALLOC = re.compile(r"-(\d\d:\d\d:\d\d\.\d+\.\d+) .*Op:Alloc memory increase.*?shape:(\([^)]*\)|\S+).*?"
                    r"dtype:(\w+).*? size:(\d+) .*?ptr:(0x[0-9a-f]+) from mem pool:1 .*?node:(\S+) index:")
_FREE = re.compile(r"-(\d\d:\d\d:\d\d\.\d+\.\d+) .*FreeMemory\] Free memory from device address:\S+ ptr:(0x[0-9a-f]+)")
_PREFIX = "Default/network-DataOrderWrapperCell/network-LlamaForCausalLM/"


@dataclass(frozen=True, slots=True)
class Block:
    time: str
    size: int
    node: str
    shape: str
    dtype: str


@dataclass(frozen=True, slots=True)
class Peak:
    bytes: int
    reached_by: Block
    live: tuple[Block, ...]
    reported_mib: int | None          # MindSpore's own figure, when the log has it


def replay(lines) -> Peak:
    """The live pool blocks at the largest total, from the allocation and release log lines."""
    from mf_memopt.estimate.measure import CPU_PEAK

    events, reported = [], None
    for number, line in enumerate(lines):
        if "Op:Alloc memory" in line:
            found = _ALLOC.search(line)
            if found:
                time, shape, dtype, size, pointer, node = found.groups()
                events.append((time, number, pointer, Block(time, int(size), node, shape, dtype)))
        elif "FreeMemory]" in line:
            found = _FREE.search(line)
            if found:
                events.append((found.group(1), number, found.group(2), None))
        elif "DumpDynamicMemPoolStateInfo]" in line:
            found = CPU_PEAK.search(line)
            reported = int(found.group(1)) if found else reported
    events.sort(key=lambda event: (event[0], event[1]))   # worker threads log out of order
    live: dict[str, Block] = {}
    total = best = 0
    snapshot: dict[str, Block] = {}
    reached = None
    for _, _, pointer, block in events:
        if block is not None:
            live[pointer] = block
            total += block.size
            if total > best:
                best, snapshot, reached = total, dict(live), block
        elif pointer in live:
            total -= live.pop(pointer).size
    if reached is None:
        raise SystemExit("pool_trace: the log has no pool allocations (was it written with ME:0 debug logging?)")
    return Peak(bytes=best, reached_by=reached, live=tuple(snapshot.values()), reported_mib=reported)


def grouped(peak: Peak) -> list[tuple[int, int, str]]:
    """(bytes, count, key) per node kind, largest first; layer indices and op numbers folded."""
    sizes, counts = collections.Counter(), collections.Counter()
    for block in peak.live:
        node = re.sub(r"-op\d+", "", re.sub(r"layers-CellList/\d+", "layers/N", block.node)).replace(_PREFIX, "")
        key = f"{node} {block.shape} {block.dtype}"
        sizes[key] += block.size
        counts[key] += 1
    return [(size, counts[key], key) for key, size in sizes.most_common()]


def trace(config: Path, log: Path) -> None:
    """Train `config` one step as `estimate --measure` does, with the allocation log on, into `log`."""
    from mf_memopt.estimate.measure import child_command, child_environment

    with tempfile.TemporaryDirectory(prefix="mf_memopt_trace_") as tmp, log.open("w") as out:
        env = {**child_environment("cpu", Path(tmp)), "MS_SUBMODULE_LOG_v": "{PRE_ACT:1,ME:0}"}
        done = subprocess.run(child_command(config.resolve(), 1, Path(tmp) / "output"), cwd=tmp, env=env,
                              stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"pool_trace: training {config} failed (exit {done.returncode}); see {log}")


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
