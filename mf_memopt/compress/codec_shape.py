"""Block sizes of the quantiser (no MindSpore here: the estimator uses them too)."""

from __future__ import annotations

import math

BLOCK_ELEMENTS = 2 ** 18   # quantised and restored in blocks of at most this many elements (1 MiB of float32)


def restore_block_rows(columns: int, group_size: int) -> int:
    """Rows per restored block: about BLOCK_ELEMENTS elements, and whole groups (blocks start on a group)."""
    align = group_size // math.gcd(columns, group_size)
    return max(align, BLOCK_ELEMENTS // columns // align * align)
