"""Helpers shared by the benchmarks: timing, medians, ratios and plain-text tables."""

from __future__ import annotations

import contextlib
import gc
import io
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any


def timed(work: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds taken by `work()` and its result.

    The collector runs before and is off during the call (as in `timeit`), so a collection
    triggered by the previous model build is not charged to whichever implementation runs next.
    """
    gc.collect()
    gc.disable()
    try:
        began = time.perf_counter()
        result = work()
        return time.perf_counter() - began, result
    finally:
        gc.enable()


def load_note() -> str:
    """The 1-minute load average: on a 2-core machine, other jobs move every timing here."""
    return f"load average {os.getloadavg()[0]:.2f} at start"


def median_ms(seconds: Sequence[float]) -> float:
    return statistics.median(seconds) * 1000


def ratio(value: float, baseline: float) -> str:
    return f"{value / baseline:.2f}x" if baseline else "n/a"


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A GitHub-flavoured Markdown table, so the output can be pasted into the README as is."""
    cells = [[str(value) for value in row] for row in rows]
    widths = [max(len(text) for text in column) for column in zip(header, *cells)]
    print(f"\n{title}\n")
    print(_row(header, widths))
    print("|" + "|".join("-" * (width + 2) for width in widths) + "|")
    for row in cells:
        print(_row(row, widths))
    print()


def _row(values: Sequence[str], widths: Sequence[int]) -> str:
    return "| " + " | ".join(value.ljust(width) for value, width in zip(values, widths)) + " |"


@contextlib.contextmanager
def teed() -> Iterator[io.StringIO]:
    """Print as usual and also collect what is printed (for a benchmark's `--out` file)."""
    printed = io.StringIO()

    class Tee(io.TextIOBase):
        def write(self, text):
            printed.write(text)
            return sys.__stdout__.write(text)

        def flush(self):
            sys.__stdout__.flush()

    with contextlib.redirect_stdout(Tee()):
        yield printed
