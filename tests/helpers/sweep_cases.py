"""The parameters of the estimate's record tests: one case per generated config of each set, named held-out or
fitted (a set is held out while no estimator term has changed because of it), a known miss a strict xfail."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest


def sweep_cases(sets: Iterable[str], generate: Callable, held_out: Iterable[str], known: dict[str, str]) -> list:
    """`pytest.param(which, config)` for every config `generate(which)` draws, with the id
    `held-out|fitted-<set>-<config>`; a config in `known` is expected to miss, strictly, for the reason given."""
    held = set(held_out)
    return [pytest.param(which, config, id=f"{'held-out' if which in held else 'fitted'}-{which}-{config.name}",
                         marks=[pytest.mark.xfail(reason=known[config.name], strict=True)]
                         if config.name in known else [])
            for which in sets for config in generate(which)]
