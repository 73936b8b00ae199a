"""The pipeline offsets, checked and laid out as MindFormers' `LayerSetting` does (the table of MindFormers' own answers
is `tests/mindspore/test_layout_offsets_mindformers.py`): an integer or a per-stage list is summed as written, then
repeated over the stages and chunks, and the layers fill the slots in order."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mf_memopt import ConfigError, load_plan

ROOT = Path(__file__).resolve().parents[2]
QWEN3 = ROOT / "configs" / "qwen3_tiny.yaml"


def _legacy(layers: int, stages: int, chunks: int, offset) -> dict:
    return {"model": {"model_config": {"num_layers": layers, "pp_interleave_num": chunks, "offset": offset}},
            "parallel_config": {"pipeline_stage": stages},
            "parallel": {"pipeline_config": {"pipeline_interleave": chunks > 1}}}


def _mcore(layers: int, stages: int, chunks: int, offset) -> dict:
    data = yaml.safe_load(QWEN3.read_text())
    data["model"]["model_config"].update(num_hidden_layers=layers, pp_interleave_num=chunks, offset=offset)
    data["parallel_config"].update(pipeline_stage=stages, micro_batch_num=2 * stages)
    data["parallel"]["pipeline_config"] = {"pipeline_interleave": chunks > 1}
    return data


def _errors(document: dict) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as raised:
        load_plan(document)
    return [(issue.path, issue.message) for issue in raised.value.issues]


# layers, stages, chunks, offset -> the layers of each (chunk, stage), as MindFormers' pp_ids and interleave_ids place
# them: (num_layers // slots + offset) per slot, filled in order until the layers run out; and whether some slot gets
# fewer than that (a warning)
REPEATED = [
    (62, 4, 2, [2, 2, 1, 1], ((9, 9, 8, 8), (9, 9, 8, 2)), True),
    (10, 4, 1, 2, ((4, 4, 2, 0),), True),
    (6, 2, 2, [1, 1], ((2, 2), (2, 0)), True),
    (8, 2, 2, [1, -1], ((3, 1), (3, 1)), False),      # adds 0 = 8 % 4, repeated too: no slot short
]


@pytest.mark.parametrize(("layers", "stages", "chunks", "offset", "sizes", "short"), REPEATED)
@pytest.mark.parametrize("build", [_legacy, _mcore], ids=["legacy", "mcore"])
def test_a_repeated_offset_lays_out_the_layers_as_mindformers_does(build, layers, stages, chunks, offset, sizes,
                                                                     short):
    plan = load_plan(build(layers, stages, chunks, offset))
    assert plan.layout.chunk_sizes == sizes
    assert [(layer.stage, layer.chunk) for layer in plan.layers] == [
        (stage, chunk) for chunk, row in enumerate(sizes) for stage, size in enumerate(row) for _ in range(size)]
    said = [warning.message for warning in plan.warnings if warning.path == "model.model_config.offset"]
    assert len(said) == short and all("MindFormers checks the offsets as written and fills the slots" in message
                                      for message in said)


@pytest.mark.parametrize("build", [_legacy, _mcore], ids=["legacy", "mcore"])
def test_a_per_stage_offset_under_interleave_is_summed_as_written(build):
    """62 layers, 4 stages x 2 chunks: MindFormers refuses [1, 1, 1, 0] ("The sum of `offset` (3) should equal to
    remainder of `num_layers` (62) % (pp (4) * pp_interleave_num (2)) = 6"), although repeated it adds 6."""
    ((path, message),) = _errors(build(62, 4, 2, [1, 1, 1, 0]))
    assert path == "model.model_config.offset"
    assert message.startswith("the offsets add 3 layers as written (MindFormers checks a per-stage list before "
                              "repeating it for each of the 2 chunks)")
    assert message.endswith("% (pipeline_stage (4) * pp_interleave_num (2)) = 6")


@pytest.mark.parametrize(("build", "counted"), [(_legacy, "num_layers (64)"), (_mcore, "num_hidden_layers (64)")],
                         ids=["legacy", "mcore"])
def test_more_stages_than_layers_is_said_so_not_asked_of_the_offsets(build, counted):
    ((path, message),) = _errors(build(64, 128, 1, 0))
    assert path == "parallel_config.pipeline_stage"
    assert message.startswith(f"the 128 pipeline stages outnumber the layers, {counted}: no offsets can give every "
                              "stage a layer")
    assert "make the offsets add up" not in message
    ((path, message),) = _errors(build(6, 4, 2, 0))
    assert path == "model.model_config.pp_interleave_num"
    assert "= 8 interleave chunks outnumber the layers" in message


def test_as_many_stages_or_chunks_as_layers_is_a_layout():
    assert load_plan(_legacy(4, 4, 1, 0)).layout.chunk_sizes == ((1, 1, 1, 1),)
    assert load_plan(_legacy(8, 4, 2, 0)).layout.chunk_sizes == ((1, 1, 1, 1), (1, 1, 1, 1))
