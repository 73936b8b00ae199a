"""Sizes on the command line (`--device-memory`, `--host-memory`): one meaning, the YAML's, said in `--help` and
in docs/; and a size that is no number of bytes is refused in one line before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mf_memopt.cli import main
from mf_memopt.estimate.report import parse_size

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "llama_tiny.yaml"
MEANING = "GB, MB and KB are 2**30, 2**20 and 2**10 bytes, as MindSpore reads the YAML's max_device_memory"


@pytest.mark.parametrize(("text", "nbytes"), [
    ("58GB", 62277025792), ("58GiB", 62277025792), ("58 GB", 62277025792), ("1024MB", 1073741824),
    ("512MiB", 536870912), ("2KB", 2048), ("1.5GB", 1610612736), ("1e3MB", 1048576000), ("1000", 1000),
    ("1000B", 1000), ("0.1GB", 107374182),        # rounded down to whole bytes, as MindSpore rounds max_device_memory
])
def test_a_size_is_read_as_mindspore_reads_max_device_memory(text, nbytes):
    assert parse_size(text) == nbytes


def test_58gb_on_the_command_line_is_the_budget_of_max_device_memory_58gb(tmp_path, capsys):
    """Copying the YAML's value to --device-memory plans for the same bytes (it was 54.0 GiB against 58)."""
    config = tmp_path / "ascend.yaml"
    config.write_text(TINY.read_text().replace('device_target: "CPU"', 'device_target: "CPU"\n  max_device_memory: '
                                                                      '"58GB"'))
    assert main(["estimate", str(config), "--json"]) == 0
    from_yaml = json.loads(capsys.readouterr().out)["budget"]
    assert main(["estimate", str(config), "--json", "--device-memory", "58GB"]) == 0
    from_flag = json.loads(capsys.readouterr().out)["budget"]
    assert from_yaml["source"].startswith("context.max_device_memory 58GB")
    assert from_flag == {"bytes": from_yaml["bytes"], "source": "--device-memory"} and from_flag["bytes"] == 58 * 2**30


@pytest.mark.parametrize("command", [["estimate", str(TINY)], ["auto", str(TINY)]])
def test_help_says_what_a_size_means(command, capsys):
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    assert MEANING in " ".join(capsys.readouterr().out.split())


def test_the_docs_say_the_same():
    budget = (ROOT / "docs" / "estimator.md").read_text().split("## The budget", 1)[1].split("\n## ", 1)[0]
    assert MEANING in " ".join(budget.replace("`", "").split())


REFUSED = [
    ("-5GB", "must be more than 0, got '-5GB'"),
    ("0", "must be more than 0, got '0'"),
    ("0MiB", "must be more than 0, got '0MiB'"),
    ("0.5B", "not a whole number of bytes: '0.5B'"),
    ("1e400", "not a finite size: '1e400'"),
    ("12 34GB", "not a size: '12 34GB' (examples: 64GiB, 32GB, 512MiB)"),
    ("", "not a size: '' (examples: 64GiB, 32GB, 512MiB)"),
]


@pytest.mark.parametrize(("text", "message"), REFUSED)
@pytest.mark.parametrize(("command", "option"), [
    (["estimate"], "--device-memory"), (["auto"], "--device-memory"),
    (["auto", "--device-memory", "1GiB"], "--host-memory"),
])
def test_a_size_that_is_no_number_of_bytes_is_refused_in_one_line(command, option, text, message, capsys):
    assert main([command[0], str(TINY), *command[1:], f"{option}={text}"]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"{command[0]}: {option}: {message}\n")
