"""`validate` against MindFormers' own checks of the pipeline layout, on a table of offsets: `check_pipeline_stage`
(models/modeling_utils.py: fewer layers than stages, or than stages x chunks) and `LayerSetting`
(parallel_core/training_graph/transformer/utils.py: `_check_inputs`, then `pp_ids` and `interleave_ids`), which the
legacy and the mcore models both build. What MindFormers refuses, validate refuses, for the same reason; what it
accepts, validate accepts and lays out layer for layer as MindFormers does. One difference, on purpose: offsets that
MindFormers' check passes (it checks them as written) but that, repeated over the chunks, leave a middle slot without
a layer once the layers run out; MindFormers' own rule asks every middle slot for a layer, and validate refuses them."""

from __future__ import annotations

import copy
import itertools
import random
from pathlib import Path
from types import SimpleNamespace

import mindspore as ms
import pytest
import yaml
from mindformers.models.modeling_utils import PreTrainedModel
from mindformers.modules import transformer
from mindformers.parallel_core.training_graph.transformer.utils import LayerSetting

from mf_memopt import ConfigError, load_plan

ROOT = Path(__file__).resolve().parents[2]
QWEN3 = yaml.safe_load((ROOT / "configs" / "qwen3_tiny.yaml").read_text())

# MindFormers' reason -> the words of validate's error for it
REASONS = {
    "num_layers of model should be greater than or equal to pipeline_stage": "pipeline stages outnumber the layers",
    "num_layers should be greater than `pp * pp_interleave_num`": "interleave chunks outnumber the layers",
    "offset.shape[-1] should equal to `pp`": "expected one per pipeline stage",
    "offset.shape[-2] should equal to `pp_interleave_num`": "a 2-D offset needs",
    "The sum of `offset`": "the offsets add",
    "Head stage has negative layers": "get too few layers",
    "Tail stage has negative layers": "get too few layers",
    "Some middle stage has fewer than 1 layer": "get too few layers",
}


def _table() -> list[tuple[int, int, int, object]]:
    """Layers, stages, chunks, offset: every integer from -2 to 3, every per-stage list of -1..2, and 2-D offsets
    drawn with a fixed seed (and of the wrong shapes), for small and large layer counts."""
    draw = random.Random(48)
    cases = []
    for layers, stages, chunks in itertools.product((3, 4, 6, 7, 10, 16, 62, 64), (2, 3, 4), (1, 2)):
        offsets: list = list(range(-2, 4))
        offsets += [list(row) for row in itertools.product(range(-1, 3), repeat=stages)]
        offsets += [[[draw.randint(-2, 3) for _ in range(stages)] for _ in range(chunks)] for _ in range(40)]
        offsets += [[0] * (stages + 1), [[0] * stages] * (chunks + 1)]
        cases += [(layers, stages, chunks, offset) for offset in offsets]
    return cases


TABLE = _table()


@pytest.fixture(autouse=True)
def _auto_parallel_context():
    yield
    ms.reset_auto_parallel_context()


def _theirs(layers: int, stages: int, chunks: int, offset) -> str | list[tuple[int, int]]:
    """MindFormers' error, or the (stage, chunk) of each layer."""
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=stages,
                                 pipeline_config={"pipeline_interleave": chunks > 1, "pipeline_scheduler": "1f1b"})
    config = SimpleNamespace(parallel_config=SimpleNamespace(pipeline_stage=stages), num_layers=layers,
                             pp_interleave_num=chunks)
    parallel = SimpleNamespace(recompute=transformer.TransformerRecomputeConfig(),
                               swap=transformer.TransformerSwapConfig(), pipeline_stage=stages,
                               gradient_aggregation_group=4)
    try:
        PreTrainedModel.check_pipeline_stage(SimpleNamespace(config=config))
        setting = LayerSetting(layers, offset, parallel, chunks)
    except ValueError as error:
        return str(error)
    return [(int(stage), int(chunk)) for stage, chunk in zip(setting.pp_ids, setting.interleave_ids)]


def _legacy(layers: int, stages: int, chunks: int, offset) -> dict:
    return {"model": {"model_config": {"num_layers": layers, "pp_interleave_num": chunks, "offset": offset}},
            "parallel_config": {"pipeline_stage": stages},
            "parallel": {"pipeline_config": {"pipeline_interleave": chunks > 1}}}


def _mcore(layers: int, stages: int, chunks: int, offset) -> dict:
    data = copy.deepcopy(QWEN3)
    data["model"]["model_config"].update(num_hidden_layers=layers, pp_interleave_num=chunks, offset=offset)
    data["parallel_config"].update(pipeline_stage=stages, micro_batch_num=2 * stages)
    data["parallel"]["pipeline_config"] = {"pipeline_interleave": chunks > 1}
    return data


def _ours(document: dict) -> list[str] | list[tuple[int, int]]:
    """validate's errors, or the (stage, chunk) of each layer."""
    try:
        plan = load_plan(document)
    except ConfigError as error:
        return [f"{issue.path}: {issue.message} ({issue.hint})" for issue in error.issues]
    return [(layer.stage, layer.chunk) for layer in plan.layers]


def _middle_slot_empty(placed: list[tuple[int, int]], stages: int, chunks: int) -> bool:
    held = {(chunk, stage) for stage, chunk in placed}
    slots = [(chunk, stage) for chunk in range(chunks) for stage in range(stages)]
    return any(slot not in held for slot in slots[1:-1])


def _disagreement(case, theirs, ours) -> str | None:
    if isinstance(theirs, str):
        words = [ours_words for reason, ours_words in REASONS.items() if theirs.startswith(reason)]
        assert words, f"a reason of MindFormers' the table does not know: {theirs}"
        if not (isinstance(ours[0], str) and any(words[0] in error for error in ours)):
            return f"{case}: MindFormers refuses it ({theirs}); validate: {ours}"
        return None
    if _middle_slot_empty(theirs, case[1], case[2]):
        if not (isinstance(ours[0], str) and any("would get no layer" in error for error in ours)):
            return f"{case}: a middle slot gets no layer; validate: {ours}"
        return None
    return None if ours == theirs else f"{case}: MindFormers lays it out as {theirs}; validate: {ours}"


@pytest.mark.parametrize("build", [_legacy, _mcore], ids=["legacy", "mcore"])
def test_validate_refuses_and_lays_out_the_offsets_as_mindformers_does(build):
    table = TABLE if build is _legacy else TABLE[::3]
    found = [_disagreement(case, _theirs(*case), _ours(build(*case))) for case in table]
    wrong = [line for line in found if line is not None]
    assert not wrong, f"{len(wrong)} of {len(table)} disagree:\n" + "\n".join(wrong[:20])


def test_the_table_holds_each_answer():
    """Both directions of the 1-D check under interleave, the repeated offsets that run out of layers, and every
    reason of MindFormers' (so the comparison above can fail in each)."""
    answers = {repr(case): (case, _theirs(*case)) for case in TABLE}
    assert isinstance(answers[repr((62, 4, 2, [1, 1, 1, 0]))][1], str)        # refused: its sum as written is 3
    assert not isinstance(answers[repr((62, 4, 2, [2, 2, 1, 1]))][1], str)    # accepted: 6, repeated 12
    assert any(not isinstance(answer, str) and _middle_slot_empty(answer, case[1], case[2])
               for case, answer in answers.values())
    said = {reason for _, answer in answers.values() if isinstance(answer, str)
            for reason in REASONS if answer.startswith(reason)}
    assert said == set(REASONS)
