"""Hostile input, one row per class: every one gets exit 0 or one clear error, from all three commands.

Each row writes a file (or a FIFO, a symlink to /dev/zero, ...) and names what `validate`
prints: the file, line and key path of the problem and words of its message. `plan` and
`estimate` must answer the same input with exit 0 or 1 and no traceback. A row that hung or
ran out of memory before would stop the test at the alarm instead of passing.
"""

from __future__ import annotations

import os
import signal
import tracemalloc
from contextlib import contextmanager
from pathlib import Path

import pytest

from mf_memopt.cli import main
from mf_memopt.document import patterns as pattern_rules

LAYOUT = "model:\n  model_config:\n    num_layers: 4\n"
MODEL = ("model:\n  model_config:\n    num_layers: 4\n    hidden_size: 64\n    num_heads: 4\n    vocab_size: 128\n"
         "    seq_length: 16\n")


def billion_laughs(levels: int = 9) -> str:
    lines = ['  a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "junk:\n" + "\n".join(lines) + "\n"


def merge_bomb(levels: int = 40) -> str:
    lines = ["m0: &m0 {x: 1, y: 2}"]
    lines += [f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}], k{i}: *m{i - 1}, v{i}: *m{i - 1}}}" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def swap_entry(prefetch: str) -> str:
    return f"swap_config:\n  swap: true\n  layer_swap:\n    - backward_prefetch: {prefetch}\n      layers: [0]\n"


def patterns(key: str, items: list[str]) -> str:
    return f"recompute_config:\n  {key}: [{', '.join(repr(item) for item in items)}]\n"


def fifo(path: Path) -> None:
    os.mkfifo(path)


def dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def directory(path: Path) -> None:
    path.mkdir()


# id, content (str: UTF-8 text; bytes: raw; callable: makes the path), expected validate output:
# (line, key path, words) of the first line, or "valid" with words of the summary and warnings.
ROWS = [
    ("billion laughs in an unrelated key", LAYOUT + billion_laughs(),
     (4, "junk", "YAML aliases expand this document to more than 100000 values")),
    ("nested merge keys", LAYOUT + merge_bomb(), (None, None, "YAML aliases expand this document")),
    ("small aliases are shared, not refused", LAYOUT + "base: &b {hidden: 8}\nother: *b\nmore: {<<: *b, x: 1}\n",
     "valid"),
    ("recursive alias", LAYOUT + "junk: &r [1, *r]\n", (4, "junk[1]", "refers to a node that contains it")),
    ("recursive merge key", LAYOUT + "junk: &r {<<: *r}\n", (4, "junk", "refers to a node that contains it")),
    ("5000-deep lists", LAYOUT + "junk: " + "[" * 5000 + "]" * 5000 + "\n",
     (4, "<document>", "nested more than 64 levels deep")),
    ("5000-deep mappings", LAYOUT + "junk: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n",
     (4, "<document>", "nested more than 64 levels deep")),
    ("deeper than MindFormers' loader allows", LAYOUT + "junk: " + "{a: " * 11 + "1" + "}" * 11 + "\n",
     (4, "junk", "MindFormers refuses configs nested more than 10 mappings deep")),
    ("UTF-8 with a byte-order mark", b"\xef\xbb\xbf" + LAYOUT.encode(), "valid"),
    ("UTF-16 with a byte-order mark", LAYOUT.encode("utf-16"), ("valid", "MindFormers opens training configs as UTF-8")),
    ("UTF-32 with a byte-order mark", LAYOUT.encode("utf-32"), ("valid", "the file is UTF-32")),
    ("Latin-1", (LAYOUT + "# caf\xe9\n").encode("latin-1"), (4, "<document>", "the file is not valid UTF-8")),
    ("UTF-16 without a byte-order mark", LAYOUT.encode("utf-16-le"),
     (1, "<document>", "invalid YAML: the character U+0000 is not allowed")),
    ("a truncated UTF-16 file", LAYOUT.encode("utf-16")[:-1], (None, "<document>", "the file is not valid UTF-16")),
    ("a FIFO", fifo, (None, "<document>", "cannot read the file: it is a FIFO (named pipe)")),
    ("a symlink to /dev/zero", dev_zero, (None, "<document>", "cannot read the file: it is a character device")),
    ("a directory", directory, (None, "<document>", "cannot read the file: it is a directory")),
    ("a file over the size limit", LAYOUT + "# " + "x" * 140_000 + "\n",
     (None, "<document>", "the file is too large for a training config")),
    ("python tag on a sequence", LAYOUT + "x: !!python/object/apply:os.system [echo hi]\n",
     (4, "x", "the YAML tag `!!python/object/apply:os.system` is not allowed")),
    ("python tag on a mapping", LAYOUT + "x: !!python/object/new:dict {a: 1}\n",
     (4, "x", "MindFormers loads configs with yaml.safe_load, which refuses Python tags")),
    ("python tag on a scalar", LAYOUT + "x: !!python/name:os.system ''\n", (4, "x", "is not allowed")),
    ("local tag on a section", LAYOUT + "recompute_config: !mine {recompute: true}\n",
     (4, "recompute_config", "the YAML tag `!mine` is not allowed")),
    ("tag on a key", LAYOUT + "!!python/str k: 1\n", (4, "<document>", "the YAML tag `!!python/str` is not allowed")),
    ("impossible date", LAYOUT + "when: 2024-13-45\n", (4, "when", "cannot read the value `2024-13-45`")),
    ("catastrophic regex against a literal exclude",
     LAYOUT + "recompute_config:\n  select_recompute: ['(a+)+b']\n  select_recompute_exclude: ['" + "a" * 40 + "c']\n",
     (5, "recompute_config.select_recompute[0]", "which can take exponential time to match")),
    ("catastrophic exclude against a literal select",
     LAYOUT + "recompute_config:\n  select_recompute: ['" + "a" * 40 + "c']\n  select_recompute_exclude: ['(a+)+b']\n",
     (6, "recompute_config.select_recompute_exclude[0]", "which can take exponential time to match")),
    ("repeated alternation", LAYOUT + patterns("select_recompute", ["(w1|w1)*x"]),
     (5, "recompute_config.select_recompute[0]", "repeats a group that itself repeats or alternates")),
    ("too many repetitions", LAYOUT + patterns("select_recompute", [".*" * 8 + "x"]),
     (5, "recompute_config.select_recompute[0]", "has 8 repetitions")),
    ("regex too long", LAYOUT + patterns("select_recompute", ["(" * 200 + ")" * 200]),
     (5, "recompute_config.select_recompute[0]", "is 400 characters long; at most 256 are allowed")),
    ("regex repetition count too large", LAYOUT + patterns("select_recompute", ["a{99999999999}"]),
     (5, "recompute_config.select_recompute[0]", "is not a valid regular expression")),
    ("2000 x 2000 select and exclude patterns",
     LAYOUT + "recompute_config:\n  select_recompute: [" + ", ".join(f"'p{i}'" for i in range(2000)) + "]\n"
     "  select_recompute_exclude: [" + ", ".join(f"'p{i}|q'" for i in range(2000)) + "]\n",
     (5, "recompute_config.select_recompute", "has 2000 entries; at most 64 are allowed")),
    ("more patterns than a config may name",
     LAYOUT + "swap_config:\n  swap: true\n  op_swap:\n" + "".join(
         f"    - op_name: [{', '.join(f'o{i}_{j}' for j in range(40))}]\n      backward_prefetch: 1\n      layers: [{i}]\n"
         for i in range(4)), (None, None, "the config names more than 128 patterns")),
    ("backward_prefetch of 2^63", LAYOUT + swap_entry(str(2**63)),
     (7, "swap_config.layer_swap[0].backward_prefetch", "must be <= 9223372036854775807")),
    ("an integer too large to print", LAYOUT + "x: 1" + ":00" * 3000 + "\n", (4, "x", "the integer is too large")),
    ("num_heads: 0", MODEL.replace("num_heads: 4", "num_heads: 0"),
     (5, "model.model_config.num_heads", "must be >= 1, got 0")),
    ("model_parallel: 0", MODEL + "parallel_config:\n  model_parallel: 0\n",
     (9, "parallel_config.model_parallel", "must be >= 1, got 0")),
    ("batch_size as a string", MODEL + "runner_config:\n  batch_size: four\n",
     (9, "runner_config.batch_size", "expected an integer, got string 'four'")),
    ("hidden_size: 1.0e+200", MODEL.replace("hidden_size: 64", "hidden_size: 1.0e+200"),
     (4, "model.model_config.hidden_size", "expected an integer, got float 1e+200")),
    ("hidden_size beyond any model", MODEL.replace("hidden_size: 64", f"hidden_size: {10**30}"),
     (4, "model.model_config.hidden_size", "must be <= 1048576")),
    ("hidden_size not a multiple of num_heads", MODEL.replace("num_heads: 4", "num_heads: 5"),
     (5, "model.model_config.num_heads", "hidden_size (64) is not a multiple of num_heads (5)")),
    ("unknown dtype", MODEL + "    compute_dtype: float61\n",
     (8, "model.model_config.compute_dtype", "did you mean `float16`?")),
    ("key with a newline cannot forge a line", LAYOUT + 'recompute_config:\n  "a\\nvalid: ok\\u202e": true\n',
     (5, "recompute_config['a\\nvalid: ok\\u202e']", "unknown key `a\\nvalid: ok\\u202e`")),
    ("interleave switched off by another key",
     "model:\n  model_config:\n    num_layers: 8\n    pp_interleave_num: 2\nparallel_config:\n  pipeline_stage: 2\n"
     "recompute_config:\n  recompute: [[1, 1], [1, 1]]\n",
     (8, "recompute_config.recompute", "parallel.pipeline_config.pipeline_interleave is not true")),
]


@contextmanager
def _bounded(seconds: int = 10, megabytes: int = 512):
    def _hung(*_):
        raise TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, _hung)
    signal.alarm(seconds)
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
        assert peak < megabytes * 2**20, f"{peak / 2**20:.0f} MiB allocated"
    finally:
        tracemalloc.stop()
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _write(tmp_path: Path, content) -> Path:
    path = tmp_path / "config.yaml"
    if callable(content):
        content(path)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def _run(command: str, path: Path, capsys) -> tuple[int, list[str], list[str]]:
    extra = ["--device-memory", "1GiB"] if command == "auto" else []
    with _bounded():
        code = main([command, str(path), *extra])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


@pytest.mark.parametrize(("content", "expected"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_hostile_input_gets_one_clear_answer(tmp_path, capsys, content, expected):
    path = _write(tmp_path, content)
    code, out, err = _run("validate", path, capsys)
    if expected == "valid" or expected[0] == "valid":
        assert code == 0, err
        assert ": valid: " in out[-1]
        if expected != "valid":
            assert any(expected[1] in line for line in err), err
    else:
        line, key, words = expected
        assert code == 1 and out == [] and err
        first = [text for text in err if words in text]
        assert first, err
        where = f"{path}:{line}: " if line is not None else f"{path}"
        assert first[0].startswith(where), first[0]
        if key is not None:
            assert f": {key}: " in first[0], first[0]
    for command in ("plan", "estimate", "auto"):  # every command reads through the same reader
        other, _, other_err = _run(command, path, capsys)
        assert other in (0, 1)
        if code == 1:  # the same input fails the same way
            assert other == 1 and other_err[:1] == err[:1]


def test_every_printed_line_is_one_problem(tmp_path, capsys):
    """Keys with line breaks are escaped, and a flood of problems is cut after 50 lines."""
    keys = "".join(f'  "k{i}\\nforged.yaml: valid: 4 layers": 1\n' for i in range(80))
    path = _write(tmp_path, LAYOUT + "swap_config:\n" + keys)
    code, out, err = _run("validate", path, capsys)
    assert code == 1 and out == []
    assert len(err) == 51 and err[-1] == "... and 30 more problem(s)"
    assert all(line.startswith(f"{path}:") for line in err[:-1])


def test_regex_the_compiler_cannot_handle_is_an_invalid_pattern(monkeypatch):
    """re.compile raises RecursionError or OverflowError, not re.error, on some patterns."""
    monkeypatch.setattr(pattern_rules, "MAX_PATTERN_LENGTH", 20_000)
    for text, words in (("(" * 5000 + ")" * 5000, "too deeply nested or too large"),
                        ("a{4294967296}", "too deeply nested or too large")):
        problems = pattern_rules.check_pattern(text)
        assert [problem.severity for problem in problems] == ["error"]
        assert "is not a valid regular expression" in problems[0].message and words in problems[0].message


def test_a_missing_file_is_named(tmp_path, capsys):
    code, _, err = _run("validate", tmp_path / "absent.yaml", capsys)
    assert code == 1 and err == [f"{tmp_path / 'absent.yaml'}: <document>: cannot read the file: No such file or directory"]
