"""The CPU memory pool's peak to the byte, replayed from MindSpore's allocation log.

With `GLOG_v=2 MS_SUBMODULE_LOG_v="{PRE_ACT:1,ME:0}"` MindSpore 2.9 logs every pool allocation
(`IncreaseNewRefCount] Op:Alloc memory ...`, with the tensor's node, shape, dtype, size and address)
and every release (`FreeMemory] ... ptr:`). Replaying them in time order gives the live bytes at
every moment. The pool hands out blocks in multiples of 512 bytes (`POOL_ALIGNMENT`), so each
tensor counts rounded up to that; the largest total then falls inside the whole MiB MindSpore
prints as its own `peak used mem` on all 36 traces this was checked on (without the rounding, 3 of
them fall below it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

POOL_ALIGNMENT = 512
CPU_PEAK = re.compile(r"DumpDynamicMemPoolStateInfo\].*?peak used mem:(\d+)M")
ALLOCATION_LOG_LEVELS = "{PRE_ACT:1,ME:0}"      # MS_SUBMODULE_LOG_v for the allocation log

_ALLOC = re.compile(r"-(\d\d:\d\d:\d\d\.\d+\.\d+) .*Op:Alloc memory increase.*?shape:(\([^)]*\)|\S+).*?"
                    r"dtype:(\w+).*? size:(\d+) .*?ptr:(0x[0-9a-f]+) from mem pool:1 .*?node:(\S+) index:")
_FREE = re.compile(r"-(\d\d:\d\d:\d\d\.\d+\.\d+) .*FreeMemory\] Free memory from device address:\S+ ptr:(0x[0-9a-f]+)")


@dataclass(frozen=True, slots=True)
class Block:
    time: str
    size: int           # the tensor's bytes as logged
    node: str
    shape: str
    dtype: str

    @property
    def pooled(self) -> int:
        """What the block takes in the pool."""
        return -(-self.size // POOL_ALIGNMENT) * POOL_ALIGNMENT


@dataclass(frozen=True, slots=True)
class PoolPeak:
    bytes: int                      # the largest live total, blocks rounded as the pool rounds them
    reached_by: Block
    live: tuple[Block, ...]
    reported_mib: int | None        # MindSpore's own figure (whole MiB, cut down), when the log has it

    def inside(self, printed_mib: int) -> bool:
        """Whether the replay falls inside a whole MiB as MindSpore prints it (cut down)."""
        return self.bytes // 2**20 == printed_mib


class NoAllocations(ValueError):
    """The log has no pool allocation lines (it was not written with the allocation log on)."""


def replay(lines: Iterable[str]) -> PoolPeak:
    """The live pool blocks at the largest total, from the allocation and release log lines."""
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
            total += block.pooled
            if total > best:
                best, snapshot, reached = total, dict(live), block
        elif pointer in live:
            total -= live.pop(pointer).pooled
    if reached is None:
        raise NoAllocations("the log has no pool allocations (was it written with ME:0 debug logging?)")
    return PoolPeak(bytes=best, reached_by=reached, live=tuple(snapshot.values()), reported_mib=reported)
