"""docs/configuration.md's key table is written from the schemas, and a stale one is caught."""

import copy
import json
from pathlib import Path

from mf_memopt.config import keytable
from mf_memopt.config.schema import load_schema

DOC = Path(__file__).resolve().parents[2] / keytable.DOC


def test_the_committed_key_table_is_the_one_the_schemas_write():
    text = DOC.read_text("utf-8")
    assert keytable.replaced(text, keytable.render()) == text, (
        f"docs/configuration.md's key table differs from the schemas; regenerate it with `{keytable.COMMAND}`")


def test_every_key_of_the_three_sections_has_a_row_with_its_description():
    table = keytable.render()
    for name, section in (("recompute_config", "section_with_counts"), ("swap_config", "section"),
                          ("compress_config", "section")):
        for key, node in load_schema(name)["$defs"][section]["properties"].items():
            assert f"| `{key}` |" in table and node["description"][:40] in table, key
    assert "| `op_swap[].op_name` |" in table and "| `op_compress[].group_size` (optional) |" in table


def test_a_changed_schema_makes_the_check_fail_and_name_the_command(tmp_path, monkeypatch, capsys):
    doc = tmp_path / "configuration.md"
    doc.write_text(keytable.replaced(DOC.read_text("utf-8"), keytable.render()), "utf-8")
    assert keytable.main(["--check", "--file", str(doc)]) == 0

    original = load_schema("swap_config")
    changed = copy.deepcopy(original)
    changed["$defs"]["section"]["properties"]["swap"]["description"] = "Master switch, now described otherwise."
    monkeypatch.setattr(keytable, "load_schema", lambda name: changed if name == "swap_config" else load_schema(name))
    assert keytable.main(["--check", "--file", str(doc)]) == 1
    assert f"regenerate it with `{keytable.COMMAND}`" in capsys.readouterr().out
    assert keytable.main(["--file", str(doc)]) == 0 and "now described otherwise" in doc.read_text("utf-8")
    assert json.dumps(original) == json.dumps(load_schema("swap_config"))


def test_a_missing_document_or_one_without_the_markers_is_refused_in_one_line(tmp_path, capsys):
    doc = tmp_path / "plain.md"
    assert keytable.main(["--check", "--file", str(doc)]) == 2
    assert "no such file" in capsys.readouterr().out
    doc.write_text("# no table here\n", "utf-8")
    assert keytable.main(["--check", "--file", str(doc)]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "markers of the key table are missing" in out
