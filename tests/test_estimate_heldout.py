"""The CPU estimate against the held-out record: the newest generated sets, measured before the estimator
first saw them, their peaks replayed to the byte (`benchmarks/sweep.py measure --exact --set fresh7|fresh8`).

The peaks are data in `benchmarks/data/`; nothing here is typed by hand. Among them are configs at the
optimizer's "end of clip-grad" checkpoint (u07, v11) and configs whose cast weights are recomputed, so a
model change that breaks a term the sets exercise fails here before a sweep is re-run.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.sweep import TARGET, _data_file, generate, measured_reference
from mf_memopt.estimate import estimate_config

HELD_OUT = ("fresh7", "fresh8")
CASES = [(which, config) for which in HELD_OUT for config in generate(which)]


def _recorded(which: str) -> dict[str, dict]:
    return {entry["name"]: entry for entry in json.loads(_data_file(which).read_text())["configs"]}


@pytest.mark.parametrize(("which", "config"), CASES, ids=[f"{which}-{config.name}" for which, config in CASES])
def test_the_held_out_record_stays_within_five_percent_of_its_exact_peak(which, config, tmp_path):
    entry = _recorded(which)[config.name]
    assert "exact_mib" in entry, f"{config.name}: the held-out record is measured to the byte"
    estimated = estimate_config(config.write(tmp_path / f"{config.name}.yaml"), runtime="cpu").stages[0].peak.peak
    reference = measured_reference(entry)
    assert abs(estimated / 2**20 - reference) / reference <= TARGET

