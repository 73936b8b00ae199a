"""The CPU estimate against the held-out record: the newest generated sets, measured before the estimator
first saw them (`benchmarks/sweep.py measure --exact --set fresh7|fresh8`, peaks replayed to the byte; fresh9,
which also varies the training step, in whole MiB with two configs to the byte; fresh10 and fresh11 to the byte).

The peaks are data in `benchmarks/data/`; nothing here is typed by hand. Among them are configs at the
optimizer's "end of clip-grad" checkpoint (u07, v11) and configs whose cast weights are recomputed, so a
model change that breaks a term the sets exercise fails here before a sweep is re-run.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.sweep import TARGET, _data_file, generate, measured_reference
from mf_memopt.estimate import estimate_config

HELD_OUT = ("fresh7", "fresh8", "fresh9", "fresh10", "fresh11")
# Known misses, each strict: the day the estimate gets it right, the mark has to go.
# (w05, over by 6.0% at the optimizer step, was one until the legacy Llama's updates ran one at a time after clip-grad)
KNOWN: dict[str, str] = {}
CASES = [pytest.param(which, config, id=f"{which}-{config.name}",
                      marks=[pytest.mark.xfail(reason=KNOWN[config.name], strict=True)] if config.name in KNOWN else [])
         for which in HELD_OUT for config in generate(which)]


def _recorded(which: str) -> dict[str, dict]:
    return {entry["name"]: entry for entry in json.loads(_data_file(which).read_text())["configs"]}


@pytest.mark.parametrize(("which", "config"), CASES)
def test_the_held_out_record_stays_within_five_percent_of_its_peak(which, config, tmp_path):
    entry = _recorded(which)[config.name]
    assert "exact_mib" in entry or which == "fresh9", f"{config.name}: the held-out record is measured to the byte"
    estimated = estimate_config(config.write(tmp_path / f"{config.name}.yaml"), runtime="cpu").stages[0].peak.peak
    reference = measured_reference(entry)
    assert abs(estimated / 2**20 - reference) / reference <= TARGET

