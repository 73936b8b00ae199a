"""`base_config`: what a config inherits is validated too, and errors point into the file that holds the value.

The merge follows MindFormers (`MindFormerConfig._file2dict`): paths relative to the file that
names them, bases combined section by section (a later base replaces a whole section), then
the file merged in key by key. tests/mindspore/test_inheritance.py compares with MindFormers' own loader.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mf_memopt import ConfigError, load_plan
from mf_memopt.document.source import load_source

BASE = """\
model:
  model_config:
    num_layers: 4
    hidden_size: 64
recompute_config:
  recompute: [-1]
  select_recompute: ['feed_forward']
"""


def _files(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _errors(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        load_plan(path)
    return raised.value.render().splitlines()


def test_an_inherited_error_names_the_base_file_and_line(tmp_path):
    _files(tmp_path, {"base/llama.yaml": BASE, "run/child.yaml": "base_config: ../base/llama.yaml\nseed: 1\n"})
    assert _errors(tmp_path / "run/child.yaml") == [
        f"{tmp_path}/run/../base/llama.yaml:6: recompute_config.recompute[0]: must be >= 0, got -1 "
        "(expected a layer count (integer >= 0, or true for all, false for none))"]


def test_the_child_overrides_key_by_key_and_keeps_the_rest(tmp_path):
    _files(tmp_path, {"base.yaml": BASE, "child.yaml": "base_config: base.yaml\nrecompute_config:\n  recompute: [1]\n"})
    source = load_source(tmp_path / "child.yaml")
    assert source.data["recompute_config"] == {"recompute": [1], "select_recompute": ["feed_forward"]}
    assert "base_config" not in source.data
    assert (source.file_of(("recompute_config", "recompute")), source.line_of(("recompute_config", "recompute"))) \
        == (str(tmp_path / "child.yaml"), 3)
    where = ("recompute_config", "select_recompute", 0)
    assert (source.file_of(where), source.line_of(where)) == (str(tmp_path / "base.yaml"), 7)
    plan = load_plan(tmp_path / "child.yaml")
    assert [layer.full_recompute is not None for layer in plan.layers] == [True, False, False, False]


def test_later_bases_replace_whole_sections_of_earlier_ones(tmp_path):
    _files(tmp_path, {"a.yaml": BASE, "b.yaml": "recompute_config:\n  recompute: true\n",
                      "child.yaml": "base_config: [a.yaml, b.yaml]\n"})
    source = load_source(tmp_path / "child.yaml")
    assert source.data["recompute_config"] == {"recompute": True}  # a.yaml's section is gone, not merged
    assert source.data["model"]["model_config"]["num_layers"] == 4
    assert load_plan(tmp_path / "child.yaml").layers[3].full_recompute is not None


def test_bases_of_bases_resolve_against_their_own_directory(tmp_path):
    _files(tmp_path, {"lib/model.yaml": "model:\n  model_config:\n    num_layers: 2\n",
                      "lib/train.yaml": "base_config: model.yaml\nrecompute_config:\n  recompute: true\n",
                      "child.yaml": "base_config: lib/train.yaml\n"})
    assert load_plan(tmp_path / "child.yaml").num_layers == 2


@pytest.mark.parametrize(("files", "words"), [
    ({"a.yaml": "base_config: b.yaml\n", "b.yaml": "base_config: [a.yaml]\n"},
     "b.yaml:1: base_config[0]: base_config cycle: a.yaml -> b.yaml -> a.yaml"),
    ({"a.yaml": "base_config: a.yaml\n"}, "a.yaml:1: base_config: base_config cycle: a.yaml -> a.yaml"),
    ({"a.yaml": "base_config: [absent.yaml]\n"},
     "a.yaml:1: base_config[0]: base config `{root}/absent.yaml`: cannot read the file: No such file or directory"),
    ({"a.yaml": "base_config: {file: b.yaml}\n"}, "a.yaml:1: base_config: expected the path of a YAML file"),
    ({"a.yaml": "base_config: b.yaml\nmodel: {model_config: {num_layers: 2}}\n", "b.yaml": "model: [1]\n"},
     "a.yaml:2: model: a mapping cannot override the inherited list (from {root}/b.yaml:1): MindFormers fails"),
    ({"a.yaml": "base_config: b.yaml\n", "b.yaml": "model: {model_config: {num_layers: 2}}\nx: !!python/name:os ''\n"},
     "b.yaml:2: x: the YAML tag `!!python/name:os` is not allowed"),
])
def test_broken_inheritance_is_one_clear_error(tmp_path, files, words):
    _files(tmp_path, files)
    errors = _errors(tmp_path / "a.yaml")
    expected = words.format(root=tmp_path)
    assert any(expected in line for line in errors), errors


def test_a_conflict_with_an_inherited_rule_names_its_file(tmp_path):
    _files(tmp_path, {"base.yaml": BASE.replace("recompute: [-1]", "recompute: [0]"),
                      "child.yaml": "base_config: base.yaml\nrecompute_config:\n  recompute: true\n"})
    plan = load_plan(tmp_path / "child.yaml")
    assert [conflict.message() for conflict in plan.conflicts] == [
        "layers 0, 1, 2, 3: full recompute (recompute_config.recompute, line 3) wins over select recompute "
        f"`feed_forward` (recompute_config.select_recompute[0], {tmp_path / 'base.yaml'} line 7), which is dropped "
        "there [full-recompute-over-select]"]


def test_auto_plans_a_config_that_inherits_and_writes_its_bases_relative_to_the_output(tmp_path, capsys):
    """`auto` reads through the same loader as every command: the inherited model and sections count, and the
    planned YAML names its base relative to where it is written."""
    from mf_memopt.cli import main

    tiny = (Path(__file__).resolve().parents[2] / "configs/llama_tiny.yaml").read_text()
    _files(tmp_path, {"bases/tiny.yaml": tiny,
                      "runs/child.yaml": "base_config: ../bases/tiny.yaml\nrecompute_config:\n  recompute: True\n"})
    out = tmp_path / "planned" / "deeper" / "auto.yaml"
    out.parent.mkdir(parents=True)
    assert main(["auto", str(tmp_path / "runs/child.yaml"), "--runtime", "cpu", "--device-memory", "60MiB",
                 "-o", str(out)]) == 0, capsys.readouterr().err
    assert "base_config: '../../bases/tiny.yaml'" in out.read_text().splitlines()
    assert load_source(out).get(("model", "model_config", "hidden_size")) == 256
    assert load_plan(out).num_layers == 4
