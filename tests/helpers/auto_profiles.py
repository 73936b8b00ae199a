"""What the `auto` tests share: no time profile from the user's cache, and hand-written profiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from mf_memopt.auto.timing import TimeTable, shape_key
from mf_memopt.document.source import load_source


@pytest.fixture(autouse=True)
def no_user_profile(tmp_path, monkeypatch):
    """A time profile cached in the user's directory would change what the cpu plans cost: none here (imported into a
    test module, it applies to every test there)."""
    monkeypatch.setenv("MF_MEMOPT_CACHE", str(tmp_path / "cache"))


def profile_table(config: Path, added: dict[str, float], layers: int = 4) -> TimeTable:
    """A profile of `config`'s shape giving each choice (by name) its added seconds per layer; keep is free."""
    return TimeTable(key=shape_key(load_source(config)), layers=layers, base_s=1.0, added_s={"keep": 0.0, **added},
                     source="test profile")
