"""Random input, structured and as raw bytes: the only exception that may escape is ConfigError, and nothing hangs."""

from __future__ import annotations

import atexit
import shutil
import signal
import tempfile
import tracemalloc
from contextlib import contextmanager
from pathlib import Path

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mf_memopt import ConfigError, Plan, load_plan
from mf_memopt.document.source import parse_yaml

KEYS = ["recompute", "select_recompute", "select_comm_recompute", "select_recompute_exclude",
        "select_comm_recompute_exclude", "recompute_slice_activation", "mp_comm_recompute",
        "parallel_optimizer_comm_recompute", "swap", "default_prefetch", "layer_swap", "op_swap", "op_name",
        "backward_prefetch", "layers"]
PATTERNS = ["feed_forward", "attention", "feed_forward\\.mul", ".*\\.norm", "feed_forward\\..*", "(", "a\\.",
            "w1", "[", "Auto", "auto", ""]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 10), st.integers(-2**40, 2**40),
                    st.floats(allow_nan=True), st.sampled_from(PATTERNS), st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5),
    st.dictionaries(st.one_of(st.sampled_from(KEYS + PATTERNS), st.text(max_size=5)), inner, max_size=5)),
    max_leaves=25)
sections = st.one_of(values, st.dictionaries(st.sampled_from(KEYS), values, max_size=6))
swap_sections = st.one_of(sections, st.fixed_dictionaries({"swap": st.just(True)},
                                                          optional={key: values for key in KEYS if key != "swap"}))


@contextmanager
def _deadline(seconds: int):
    def _hung(*_):
        raise TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, _hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _load_or_config_error(document):
    with _deadline(10):
        try:
            return load_plan(document)
        except ConfigError as error:
            assert error.issues and all(issue.severity == "error" for issue in error.issues)
            return error


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(num_layers=225_993_744_687, stages=225_993_744_687, offset=0, recompute={}, swap={})  # ran out of memory
@given(num_layers=st.one_of(st.integers(1, 48), values), stages=st.one_of(st.integers(1, 6), values),
       offset=st.one_of(st.just(0), values), recompute=sections, swap=swap_sections)
def test_random_sections_raise_only_config_error(num_layers, stages, offset, recompute, swap):
    document = {"model": {"model_config": {"num_layers": num_layers, "offset": offset}},
                "parallel_config": {"pipeline_stage": stages},
                "recompute_config": recompute, "swap_config": swap}
    result = _load_or_config_error(document)
    assert isinstance(result, (Plan, ConfigError))
    if isinstance(result, Plan):
        assert len(result.layers) == num_layers


@settings(max_examples=200, deadline=None)
@given(recompute=sections, swap=swap_sections)
def test_random_yaml_text_raises_only_config_error(recompute, swap):
    try:
        text = yaml.safe_dump({"model": {"model_config": {"num_layers": 4}}, "recompute_config": recompute,
                               "swap_config": swap})
    except yaml.YAMLError:
        return
    with _deadline(10):
        try:
            load_plan(parse_yaml(text, "fuzz.yaml").data)
        except ConfigError:
            pass


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200))
def test_arbitrary_text_raises_only_config_error(text):
    with _deadline(10):
        try:
            parse_yaml(text, "fuzz.yaml")
        except ConfigError:
            pass


# Raw bytes: YAML syntax, tags, anchors, encodings and invalid bytes, written to a file and read
# the way the CLI reads it (base_config included). Only ConfigError may escape, within 10 s and
# a bounded amount of memory.
TOKENS = [
    "\n", "  ", "    ", "- ", ": ", ", ", "[", "]", "{", "}", "'", '"', "\\", "#", "\t", "? ", "|", ">", "%YAML 1.1\n",
    "---\n", "...\n", "&a ", "*a", "&b ", "*b", "<<: ", "<<: *a", "!!python/object/apply:os.system ", "!local ",
    "!!str ", "!!binary ", "!!set ", "!!omap ", "!!timestamp ", "recompute_config", "swap_config", "model",
    "model_config", "num_layers", "num_heads", "hidden_size", "parallel_config", "model_parallel", "pipeline_stage",
    "recompute", "select_recompute", "select_recompute_exclude", "op_swap", "layer_swap", "op_name", "layers",
    "backward_prefetch", "swap", "true", "~", "null", "4", "0", "-1", "1.5", "1.0e+200", "0x1F", "1:00:00",
    "9223372036854775808", "2024-13-45", "'(a+)+b'", "'.*'", "'feed_forward\\.mul'", "Auto", "base_config: ",
    "config.yaml", "[other.yaml]", "\x00", "\x1b[2J", "\u2028", "\ufeff", "é",
]
PREFIX = "model:\n  model_config:\n    num_layers: 4\n    hidden_size: 64\n    num_heads: 4\n    vocab_size: 64\n" \
         "    seq_length: 8\n"
yaml_text = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)
raw_bytes = st.one_of(
    st.binary(max_size=200),
    yaml_text.map(lambda text: text.encode("utf-8", "surrogatepass")),
    yaml_text.map(lambda text: (PREFIX + text).encode("utf-8")),
    st.tuples(st.sampled_from(["utf-16", "utf-32", "utf-8-sig", "utf-16-le", "latin-1"]), yaml_text).map(
        lambda pair: (PREFIX + pair[1]).encode(pair[0], "replace")),
    st.tuples(yaml_text, st.binary(max_size=20)).map(lambda pair: (PREFIX + pair[0]).encode() + pair[1]),
)
_WORKDIR = tempfile.mkdtemp(prefix="mf_memopt_fuzz_")
atexit.register(shutil.rmtree, _WORKDIR, True)
Path(_WORKDIR, "other.yaml").write_text(PREFIX + "recompute_config:\n  recompute: true\n")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(raw=b"junk: &a [*a]\n")
@example(raw=("junk: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10))).encode())
@example(raw=b"junk: " + b"[" * 5000 + b"]" * 5000)
@example(raw=b"base_config: config.yaml\n")
@example(raw=b"!!timestamp")  # AttributeError inside PyYAML
@given(raw=raw_bytes)
def test_raw_yaml_bytes_raise_only_config_error(raw):
    from mf_memopt.estimate import estimate_config

    path = Path(_WORKDIR, "config.yaml")
    path.write_bytes(raw)
    tracemalloc.start()
    try:
        with _deadline(10):
            for run in (load_plan, estimate_config):
                try:
                    run(path)
                except ConfigError as error:
                    assert error.issues and all(issue.severity == "error" for issue in error.issues)
                    assert all("\n" not in issue.render() for issue in error.issues)
        assert tracemalloc.get_traced_memory()[1] < 256 * 2**20
    finally:
        tracemalloc.stop()
