"""The device-memory budget read from a training YAML (`estimate/budget.py`), against what MindSpore does with
`context.max_device_memory`. The expected numbers are written out, from these facts of MindSpore's source:

- `mindspore/runtime/memory.py` (`_MEMORY_PATTERN`, `_check_memory_conf_valid`, `set_memory`) and
  `mindspore/context.py` (`_RE_PATTERN`, `set_max_device_memory`) accept `[1-9][0-9]*(\\.)?[0-9]*GB|0\\.[0-9]*GB`
  only, refuse "0GB", and keep `float(text[:-2])`: "1024MB", "58 GB", "58GiB", "58" and "058GB" are refused.
- The wheel's `include/mindspore/core/include/utils/convert_utils_base.h`: `kGBToByte = 1024 << 20`;
  `AscendMemAdapter::GetDeviceMemSizeFromContext` sizes the pool at the number times kGBToByte when it is at most
  the card's memory (64 on a 910B).
- Above the card, `AscendMemAdapter::Initialize` gives the pool `free * kMSMemoryRatio` (0.9375), rounded down
  to `kPerHugePageMemorySize` (2097152), less `kExtraReservedMemory` (10485760): of a free 64 GiB card
  (68719476736 bytes) 64424509440 rounded down, less 10485760, is 64414023680.
- MindFormers' template writes "58GB" into a YAML without the key (`ContextConfig.max_device_memory`).
"""

from __future__ import annotations

import pytest

from mf_memopt.document.source import parse_yaml
from mf_memopt.estimate.budget import device_budget


def _budget(value: str | None, runtime: str = "ascend", override: int | None = None):
    text = "model: {}\n" if value is None else f"context:\n  max_device_memory: {value}\nmodel: {{}}\n"
    issues: list = []
    return device_budget(parse_yaml(text, "run.yaml"), runtime, override, issues), issues


@pytest.mark.parametrize(("value", "nbytes"), [
    ('"58GB"', 62277025792),           # 58 GiB, not 58 * 10**9
    ('"1GB"', 1073741824),
    ('"3.5GB"', 3758096384),
    ('"0.5GB"', 536870912),
    ('"58.GB"', 62277025792),          # the pattern allows a point with no digits after it; float("58.") is 58.0
    ('"64GB"', 68719476736),           # at the card's memory: still a cap
])
def test_a_value_mindspore_accepts_is_its_number_of_gib(value, nbytes):
    budget, issues = _budget(value)
    assert (budget.nbytes, issues) == (nbytes, [])
    assert budget.source.startswith(f"context.max_device_memory {value.strip(chr(34))} (run.yaml:2)")


@pytest.mark.parametrize("value", ['"1024GB"', '"65GB"'])
def test_a_value_above_the_card_is_no_cap_but_15_16_of_a_free_64_gib_card_less_10_mib(value):
    budget, issues = _budget(value)
    assert (budget.nbytes, issues) == (64414023680, [])
    assert "15/16" in budget.source


@pytest.mark.parametrize("value", ['"1024MB"', '"58 GB"', '"58GiB"', '"58gb"', '"58"', "58", '"058GB"', '"0GB"',
                                   '"0.0GB"', '"-5GB"', '""'])
def test_a_value_mindspore_refuses_is_one_error_and_the_template_default_stands(value):
    budget, issues = _budget(value)
    assert budget.nbytes == 62277025792
    assert [issue.render() for issue in issues] == [
        f"run.yaml:2: context.max_device_memory: {_shown(value)!r} is not a size MindSpore accepts (write a number "
        'of GB above 0 as MindSpore reads it, e.g. "58GB" (GB: 2**30))']


def test_zero_written_another_way_is_refused_too():
    """MindSpore's pattern lets "0.GB" through `set_memory` as 0.0, which the Ascend pool takes as no cap at all
    (`GetDeviceMemSizeFromContext` returns 0); `context.set_context` refuses 0 outright. The estimate refuses it."""
    budget, issues = _budget('"0.GB"')
    assert budget.nbytes == 62277025792 and len(issues) == 1


def _shown(value: str):
    """The YAML scalar as the reader gives it."""
    return value.strip('"') if value.startswith('"') else int(value)


def test_without_the_key_mindformers_template_58gb_stands():
    budget, issues = _budget(None)
    assert (budget.nbytes, issues) == (62277025792, [])
    assert budget.source == ("MindFormers' default max_device_memory 58GB (the YAML has no "
                             "context.max_device_memory)")


def test_the_command_line_comes_first_and_the_cpu_runtime_ignores_the_ascend_key():
    assert _budget('"58GB"', override=1000)[0].nbytes == 1000
    assert _budget('"58GB"', runtime="cpu")[0].nbytes == 68719476736      # the estimate's cpu default, 64 GiB
    assert _budget('"1024MB"', runtime="cpu") == (_budget(None, runtime="cpu")[0], [])
