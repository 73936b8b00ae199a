"""`auto --balance` writes the offsets it chose into the user's YAML text: whatever shape the model section has,
the written YAML reads, validates, and differs from the input only in the offsets."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mf_memopt import ConfigError
from mf_memopt.auto.balance import _Pipeline, balance_plan
from mf_memopt.cli import main
from mf_memopt.document.source import parse_yaml

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "configs" / "planning" / "llama2_7b_swap_pp2.yaml"    # legacy, 2 stages, `offset: 0`
QWEN3 = ROOT / "configs" / "qwen3_tiny.yaml"                          # mcore, 1 stage
OFFSET = ("model", "model_config", "offset")
BUDGET = 58 * 2**30


def _llama(text: str) -> str:
    return text.replace("    offset: 0\n", "")


def _first_key(block: str):
    """The model section with `block` as its first key (and no offset)."""
    return lambda text: _llama(text).replace("  model_config:\n", "  model_config:\n" + block, 1)


def _flow_style(text: str) -> str:
    """model_config written as one flow mapping (`{type: LlamaConfig, ...}`), without an offset."""
    data = yaml.safe_load(_llama(text))["model"]["model_config"]
    start = text.index("  model_config:\n")
    end = text.index("  arch:\n")
    flow = yaml.safe_dump(data, default_flow_style=True, width=10**6, sort_keys=False).strip()
    return text[:start] + f"  model_config: {flow}   # one line\n" + text[end:]


def _qwen3_pipeline(text: str) -> str:
    """The tiny Qwen3 on 2 stages, its model section starting with `architectures:` and a block list."""
    text = text.replace("  pipeline_stage: 1\n", "  pipeline_stage: 2\n").replace("  micro_batch_num: 1\n",
                                                                                   "  micro_batch_num: 4\n")
    return text.replace("model:\n  model_config:\n", "model:\n  model_config:\n    architectures:\n"
                        "    - Qwen3ForCausalLM\n", 1)


SHAPES = {
    "a nested mapping first (rope_scaling)": (LLAMA, _first_key("    rope_scaling:\n      factor: 8.0\n"
                                                                 "      rope_type: llama3\n")),
    "a block list first": (LLAMA, _first_key("    architectures:\n      - LlamaForCausalLM\n")),
    "a block list first, not indented (mcore)": (QWEN3, _qwen3_pipeline),
    "a block scalar first": (LLAMA, _first_key("    notes: |\n      planned by hand\n\n")),
    "a flow mapping": (LLAMA, _flow_style),
    "comments and a nested mapping last": (LLAMA, lambda text: _llama(text).replace(
        "    use_flash_attention: True\n", "    use_flash_attention: True  # on Ascend\n    # the scaling:\n"
        "    rope_scaling:\n      factor: 8.0   # x8\n\n    # end of the model\n")),
    "an existing offset as a block list": (LLAMA, lambda text: text.replace(
        "    offset: 0\n", "    offset:      # per stage\n      - 0\n      - 0\n    # after the offset\n")),
    "no line break at the end": (LLAMA, lambda text: text.replace("    offset: 0\n", "").rstrip("\n")),
}


def _top(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("shape", SHAPES)
def test_balance_writes_yaml_that_reads_validates_and_keeps_every_other_key(shape, tmp_path, capsys):
    base, edit = SHAPES[shape]
    config = tmp_path / "input.yaml"
    config.write_text(edit(base.read_text()))
    before = _top(config)
    result = balance_plan(config, budget=BUDGET)
    written = tmp_path / "balanced.yaml"
    written.write_text(result.text)
    after = _top(written)
    assert after["model"]["model_config"].pop("offset") == result.balanced.offsets
    before["model"]["model_config"].pop("offset", None)
    # every section but the ones `auto` plans is as it was, value for value
    planned = ("recompute_config", "swap_config")
    assert {k: v for k, v in after.items() if k not in planned} == {k: v for k, v in before.items() if k not in planned}
    assert main(["validate", str(written)]) == 0, capsys.readouterr().err


def test_the_offsets_replace_an_existing_block_list_in_place():
    text = "model:\n  model_config:\n    offset:   # per stage\n      - 1\n      - -1\n    # next\n    num_layers: 4\n"
    edited = _Pipeline.with_offsets(SimpleNamespace(offset_key=OFFSET), parse_yaml(text, "in.yaml"), [0, 0])
    assert edited.text == "model:\n  model_config:\n    offset: [0, 0]\n    # next\n    num_layers: 4\n"


def test_an_edit_that_does_not_read_back_is_the_writers_error_not_the_inputs(monkeypatch):
    """The check behind every edit: text that does not parse, or parses to another document, is reported as an
    internal error of the writer; the user's (valid) file is never named as the one at fault."""
    from mf_memopt.auto import offsets_writer

    text = "model:\n  model_config:\n    rope_scaling:\n      factor: 8.0\n    num_layers: 4\n"
    source = parse_yaml(text, "user.yaml")
    # the defect this writer replaced: a line added right after the first key, inside its block
    monkeypatch.setattr(offsets_writer, "_added_to_block",
                        lambda text, mapping, entry: text.replace("rope_scaling:\n", f"rope_scaling:\n    {entry}\n"))
    with pytest.raises(offsets_writer.WriterError, match="internal error in mf_memopt.auto.offsets_writer") as raised:
        offsets_writer.write_offsets(source, OFFSET, [1, -1])
    assert not isinstance(raised.value, ConfigError) and "user.yaml itself reads correctly" in str(raised.value)
    monkeypatch.setattr(offsets_writer, "_added_to_block",
                        lambda text, mapping, entry: text.replace("factor: 8.0", "factor: 9.0") + f"    {entry}\n")
    with pytest.raises(offsets_writer.WriterError, match="changed more than that key"):
        offsets_writer.write_offsets(source, OFFSET, [1, -1])


def test_a_writer_error_ends_auto_balance_in_one_line(monkeypatch, capsys):
    from mf_memopt.auto import balance, offsets_writer

    def broken(*args, **kwargs):
        raise offsets_writer.WriterError("internal error in mf_memopt.auto.offsets_writer: the edit did not read back")

    monkeypatch.setattr(balance, "balance_plan", broken)
    assert main(["auto", str(LLAMA), "--balance"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("auto --balance: internal error in mf_memopt.auto.offsets_writer") and err.count("\n") == 1


def test_a_model_section_only_inherited_is_refused_before_planning(tmp_path):
    (tmp_path / "base.yaml").write_text(LLAMA.read_text())
    top = tmp_path / "top.yaml"
    top.write_text("base_config: base.yaml\nparallel_config:\n  micro_batch_num: 4\n")
    with pytest.raises(ConfigError, match="has no model.model_config section of its own"):
        balance_plan(top, budget=BUDGET)


# -- any shape of model section (hypothesis) --

NAMES = ["rope_scaling", "architectures", "type", "num_layers", "hidden_size", "notes", "x"]
scalars = st.one_of(st.integers(-5, 99), st.booleans(), st.sampled_from(["llama3", "a b", "'quoted'", "1.5"]))


@st.composite
def _values(draw, depth: int = 0):
    """(kind, value): a scalar, a flow list, a block list, a nested block mapping, or a block scalar."""
    kinds = ["scalar", "flow list", "block scalar", "alias"] + (["block list", "mapping"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "scalar":
        return kind, draw(scalars)
    if kind == "flow list":
        return kind, draw(st.lists(st.integers(-3, 9), max_size=4))
    if kind == "block scalar":
        return kind, (draw(st.sampled_from("|>")), draw(st.sampled_from(["one line", "two\nlines"])))
    if kind == "alias":
        return kind, "*shared"
    if kind == "block list":
        return kind, draw(st.lists(st.integers(-3, 9), min_size=1, max_size=3))
    keys = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    return kind, [(key, draw(_values(depth + 1))) for key in keys]


def _scalar(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int) or value.startswith("'") else f'"{value}"'


def _block(key: str, kind_value, indent: int, comment: str) -> list[str]:
    kind, value = kind_value
    pad = " " * indent
    if kind == "scalar":
        return [f"{pad}{key}: {_scalar(value)}{comment}"]
    if kind == "flow list":
        return [f"{pad}{key}: [{', '.join(map(str, value))}]{comment}"]
    if kind == "alias":
        return [f"{pad}{key}: {value}{comment}"]
    if kind == "block scalar":
        style, lines = value
        return [f"{pad}{key}: {style}{comment}", *(f"{pad}  {line}" for line in lines.split("\n"))]
    if kind == "block list":
        return [f"{pad}{key}:{comment}", *(f"{pad}  - {item}" for item in value)]
    return [f"{pad}{key}:{comment}", *(line for name, inner in value for line in _block(name, inner, indent + 2, ""))]


@st.composite
def _documents(draw):
    """A YAML document whose model.model_config takes a random shape, and the offsets to write into it."""
    keys = draw(st.lists(st.sampled_from(NAMES), max_size=5, unique=True))
    entries = [(key, draw(_values())) for key in keys]
    existing = draw(st.sampled_from([None, "scalar", "flow list", "block list"]))
    if existing is not None:
        value = 0 if existing == "scalar" else [0, 0]
        entries.insert(draw(st.integers(0, len(entries))), ("offset", (existing, value)))
    lines = ["shared: &shared {p: 1}", "model:"]
    if draw(st.booleans()) and all(kind in ("scalar", "flow list", "alias") for _, (kind, _) in entries):
        inner = ", ".join(f"{key}: {_block(key, value, 0, '')[0].split(': ', 1)[1]}" for key, value in entries)
        lines.append(f"  model_config: {{{inner}}}  # flow")
    else:
        lines.append("  model_config:" + (" {}" if not entries else ""))
        for key, value in entries:
            comment = draw(st.sampled_from(["", "  # note"]))
            quoted = draw(st.sampled_from([key, f'"{key}"']))
            lines += _block(quoted, value, 4, comment)
            lines += draw(st.sampled_from([[], [""], ["    # a comment line"], ["# at column 0"]]))
    lines += draw(st.sampled_from([["  arch:", "    type: X"], [], ["other: 1"]]))
    offsets = draw(st.sampled_from([[1, -1], [[1, 0], [0, -1]], 0]))
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n# end\n"])), offsets


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_documents())
def test_any_model_section_shape_gets_the_offsets_and_keeps_the_rest(document):
    text, offsets = document
    source = parse_yaml(text, "in.yaml")
    edited = _Pipeline.with_offsets(SimpleNamespace(offset_key=OFFSET), source, offsets)
    expected = yaml.safe_load(text)
    expected["model"]["model_config"]["offset"] = offsets
    assert yaml.safe_load(edited.text) == expected
    assert parse_yaml(edited.text, "out.yaml").get(OFFSET) == offsets
    # line for line: only the offset's own lines change (a flow mapping's one line as a whole)
    changed = [line for line in difflib.ndiff(text.splitlines(), edited.text.splitlines()) if line[:2] in ("- ", "+ ")]
    assert all(re.search(r"offset|^[-+] +- \d|model_config: \{", line) for line in changed), changed
