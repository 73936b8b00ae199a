"""compress_config on a real MindFormers Llama: replacement cells, same parameters, exact or close training.

A 2-layer Llama (hidden 64, seq 64) is built by `session.prepare`, exactly as the launcher
builds it, with mf_memopt's `apply_plan` installing the compressed cells.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml


W2 = "feed_forward\\.w2"


def _config(tmp_path, name, compress=None):
    data = yaml.safe_load(open("configs/llama_tiny.yaml"))
    data["model"]["model_config"].update(num_layers=2, hidden_size=64, num_heads=2, seq_length=64, vocab_size=128)
    data["recompute_config"] = {"recompute": False, "select_recompute": False, "select_comm_recompute": False}
    data["output_dir"] = str(tmp_path / "output")
    data["train_dataset"]["data_loader"]["dataset_dir"] = str(tmp_path / "tokens.mindrecord")
    if compress is not None:
        data["compress_config"] = {"compress": True, **compress}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _session(tmp_path, name, compress=None):
    from mf_memopt.runtime.session import prepare

    return prepare(_config(tmp_path, name, compress))


def _copy_parameters(source, target):
    """Load `source`'s parameters into `target` by name, as a checkpoint load does."""
    import mindspore as ms

    missing, _ = ms.load_param_into_net(target.network, {p.name: ms.Parameter(p.data.copy(), name=p.name)
                                                         for p in source.network.trainable_params()})
    assert missing == []


def _train(session, steps):
    from benchmarks.compress import train_session

    return train_session(session, steps)[0]


def _names(session):
    return [param.name for param in session.network.trainable_params()]


def test_lossless_trains_bit_identically_with_the_same_parameter_names(tmp_path):
    base = _session(tmp_path, "base")
    lossless = _session(tmp_path, "dense", {"compress_dense": "level0"})
    assert _names(lossless) == _names(base)
    _copy_parameters(base, lossless)
    layer = lossless.network.model.layers[0]
    assert type(layer.feed_forward).__name__ == "LosslessFeedForward"
    assert _train(lossless, 4) == _train(base, 4)
    for mine, theirs in zip(lossless.network.trainable_params(), base.network.trainable_params()):
        assert np.array_equal(mine.asnumpy(), theirs.asnumpy()), mine.name
    assert lossless.report.log_lines[-2:] == (
        "Set op_compress at layer 0: feed_forward.w2, method=lossless",
        "Set op_compress at layer 1: feed_forward.w2, method=lossless")


def test_int8_forward_is_exact_and_training_follows_the_baseline(tmp_path):
    from mf_memopt.compress.build import library

    base = _session(tmp_path, "base")
    int8 = _session(tmp_path, "int8", {"op_compress": [{"op_name": "feed_forward\\.(w1|w2|w3)", "method": "int8",
                                                         "layers": True}]})
    assert _names(int8) == _names(base)
    _copy_parameters(base, int8)
    assert [type(cell).__name__ for cell in (int8.network.model.layers[1].feed_forward.w1,
                                            int8.network.model.layers[1].feed_forward.w2)] == ["CompressedLinear"] * 2
    mine, theirs = _train(int8, 6), _train(base, 6)
    assert mine[0] == theirs[0]                       # the forward pass does not see the compression
    assert mine[1:] != theirs[1:]                     # the gradients do, a little
    assert np.allclose(mine, theirs, rtol=2e-3), (mine, theirs)
    assert int8.report.log_lines[-1] == ("Set op_compress at layer 1: feed_forward.w1, method=int8, "
                                         "feed_forward.w2, method=int8, feed_forward.w3, method=int8")
    assert int8.report.to_dict()["compressed"][0] == {
        "layer": 0, "path": "feed_forward.w1", "method": "int8", "group_size": 256, "codec": "fused",
        "rule": "compress_config.op_compress[0]", "line": _line(tmp_path / "int8.yaml", 0),
        "replaced_by": "CompressedLinear"}
    assert [line for line in int8.report.log_lines if line.startswith("Compression codec: ")] == [
        f"Compression codec: fused (C++ kernels, ops.Custom aot) for int8/int4/int2: {library().path} "
        f"({library().compiler})"]


def test_the_reference_codec_runs_when_asked_and_the_report_and_log_say_so(tmp_path, monkeypatch):
    monkeypatch.setenv("MF_MEMOPT_CODEC", "reference")
    session = _session(tmp_path, "reference", {"op_compress": [{"op_name": W2, "method": "int4", "layers": [1]}]})
    codec = session.network.model.layers[1].feed_forward.w2.compressed_matmul.codec
    assert type(codec).__name__ == "GroupCodec"
    assert [entry["codec"] for entry in session.report.to_dict()["compressed"]] == ["reference"]
    assert ("Compression codec: reference (MindSpore graph operators) for int8/int4/int2: MF_MEMOPT_CODEC=reference"
            in session.report.log_lines)


def _line(path, entry):
    """The line of the `entry`-th op_compress item (where its `- op_name:` is)."""
    return [number for number, text in enumerate(path.read_text().splitlines(), 1) if "- op_name:" in text][entry]


def test_partial_users_and_impossible_lossless_are_warned_with_key_and_line(tmp_path):
    session = _session(tmp_path, "partial", {"op_compress": [
        {"op_name": "feed_forward\\.w1", "method": "int2", "layers": [0]},
        {"op_name": "attention\\.wq", "method": "lossless", "layers": [1]}]})
    layers = session.network.model.layers
    assert type(layers[0].feed_forward.w3).__name__ == "CompressedLinear"       # w1 and w3 share their input
    assert type(layers[1].attention.wq).__name__ == "Linear"                   # nothing lossless to do there
    warnings = [line for line in session.report.log_lines if "warning:" in line]
    path = tmp_path / "partial.yaml"
    assert warnings == [
        f"{path}:{_line(path, 0)}: compress_config.op_compress[0]: warning: in layer 0, "
        "feed_forward.w1 shares its input with feed_forward.w3; the input is freed only if every backward reader "
        "keeps a compressed copy, so feed_forward.w3 is compressed too (int2) (name them all, e.g. "
        "'feed_forward\\.(w1|w3)', to silence this)",
        f"{path}:{_line(path, 1)}: compress_config.op_compress[1]: warning: in layer 1, no lossless "
        "transform saves memory for attention.wq: its input can be rebuilt exactly only where it is the product of "
        "two tensors the backward keeps anyway, which is true of feed_forward.w2 of a Llama MLP alone (see "
        "docs/compression.md); it is left uncompressed (use int8 (or int4, int2) for it, or remove it)"]
    assert session.report.log_lines[-1] == ("Set op_compress at layer 0: feed_forward.w1, method=int2, "
                                            "feed_forward.w3, method=int2")


def test_the_attention_projections_share_their_input_and_are_compressed_together(tmp_path):
    session = _session(tmp_path, "attention", {"op_compress": [
        {"op_name": "attention\\.wq", "method": "int4", "layers": [1]},
        {"op_name": "attention\\.wo", "method": "int4", "layers": [1]}]})
    attention = session.network.model.layers[1].attention
    assert [type(getattr(attention, name)).__name__ for name in ("wq", "wk", "wv", "wo")] == ["CompressedLinear"] * 4
    assert type(session.network.model.layers[0].attention.wk).__name__ == "Linear"
    warnings = [line.split("warning: ", 1)[1] for line in session.report.log_lines if "warning:" in line]
    assert warnings == [
        f"in layer 1, attention.wq shares its input with attention.{partner}; the input is freed only if every "
        f"backward reader keeps a compressed copy, so attention.{partner} is compressed too (int4) (name them all, "
        "e.g. 'attention\\.(wk|wq|wv)', to silence this)" for partner in ("wk", "wv")]
    assert session.report.log_lines[-1] == ("Set op_compress at layer 1: attention.wk, method=int4, attention.wo, "
                                            "method=int4, attention.wq, method=int4, attention.wv, method=int4")


def test_a_compressed_w2_rebuilds_the_gate_unless_the_plan_recomputes_the_activation(tmp_path):
    from mf_memopt.runtime.session import prepare

    path = _config(tmp_path, "gate", {"op_compress": [{"op_name": W2, "method": "int4", "layers": True}]})
    data = yaml.safe_load(path.read_text())
    data["recompute_config"]["select_recompute"] = {"feed_forward\\.w1\\.activation": [1]}   # the first layer
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    session = prepare(path)
    layers = session.network.model.layers
    assert type(layers[0].feed_forward).__name__ == "LlamaFeedForward"           # the activation is recomputed
    assert type(layers[0].feed_forward.w2).__name__ == "CompressedLinear"
    assert type(layers[1].feed_forward).__name__ == "GatedFeedForward"           # keeps w1's pre-activation only
    assert [line for line in session.report.log_lines if line.startswith("op_compress:")] == [
        "op_compress: layer 0: feed_forward.w1.activation is recomputed, so the MLP keeps its gate as autodiff "
        "does; only feed_forward.w2's input is compressed"]
    assert [entry.get("gate_rebuilt", False) for entry in session.report.to_dict()["compressed"]] == [False, True]


def test_a_cell_that_cannot_be_compressed_is_an_error_and_nothing_is_replaced(tmp_path):
    from mf_memopt import ConfigError, apply_plan, load_plan
    from mf_memopt.models.llama import LLAMA
    from mf_memopt.runtime.build import build_model, read_config

    path = _config(tmp_path, "bad", {"op_compress": [
        {"op_name": W2, "method": "int8", "layers": [0]},
        {"op_name": "attention", "method": "int8", "layers": [1]},
        {"op_name": "feed_forward\\.w9", "method": "int8", "layers": [1]}]})
    built = build_model(read_config(path), LLAMA, device_target="CPU")
    with pytest.raises(ConfigError) as raised:
        apply_plan(load_plan(path), built.network)
    messages = [issue.message for issue in raised.value.issues]
    assert any("attention is a LLamaAttention; op_compress compresses the input that a linear cell" in message
               for message in messages)
    assert any("segment `w9` matched nothing" in message for message in messages)
    assert type(built.network.model.layers[0].feed_forward.w2).__name__ == "Linear"
