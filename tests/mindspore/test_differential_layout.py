"""Normalisation against MindFormers' own LayerSetting, on random pipeline layouts.

With swap off, both must pick the same full-recompute layers and print the same
per-chunk counts, for every valid layout and count form.
"""

from __future__ import annotations

from types import SimpleNamespace

import mindspore as ms
from hypothesis import given, settings
from hypothesis import strategies as st
from mindformers.modules import transformer
from mindformers.parallel_core.training_graph.transformer import utils as layer_utils

from mf_memopt import load_plan
from mf_memopt.config.render import formative_lines




@st.composite
def layouts(draw):
    chunks = draw(st.integers(1, 2))
    stages = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.lists(st.integers(1, 4), min_size=stages, max_size=stages),
                          min_size=chunks, max_size=chunks))
    return chunks, stages, sizes


def _count(draw_value):
    return st.one_of(st.integers(0, 6), st.booleans())


@st.composite
def counts(draw, chunks, stages):
    form = draw(st.sampled_from(["bool", "stage", "chunk"]))
    if form == "bool":
        return draw(st.booleans())
    if form == "stage":
        return draw(st.lists(_count(draw), min_size=stages, max_size=stages))
    return draw(st.lists(st.lists(_count(draw), min_size=stages, max_size=stages), min_size=chunks, max_size=chunks))


def _mindformers_setting(num_layers, offset, stages, chunks, recompute, select):
    ms.set_auto_parallel_context(pipeline_config={"pipeline_interleave": chunks > 1, "pipeline_scheduler": "1f1b"})
    config = transformer.TransformerRecomputeConfig(recompute=recompute, select_recompute=select)
    parallel = SimpleNamespace(recompute=config, swap=transformer.TransformerSwapConfig(), pipeline_stage=stages,
                               gradient_aggregation_group=4)
    return layer_utils.LayerSetting(num_layers, offset, parallel, chunks)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_full_and_select_recompute_agree_with_mindformers(data):
    chunks, stages, sizes = data.draw(layouts())
    num_layers = sum(map(sum, sizes))
    base = num_layers // (chunks * stages)
    offset = [[size - base for size in row] for row in sizes] if chunks * stages > 1 else 0
    recompute = data.draw(counts(chunks, stages))
    select = data.draw(counts(chunks, stages))
    pattern = "feed_forward\\.w3\\.matmul"

    doc = {"model": {"model_config": {"num_layers": num_layers, "offset": offset, "pp_interleave_num": chunks}},
           "parallel_config": {"pipeline_stage": stages},
           "parallel": {"pipeline_config": {"pipeline_interleave": chunks > 1}},
           "recompute_config": {"recompute": recompute, "select_recompute": {pattern: select}}}
    plan = load_plan(doc)
    theirs = _mindformers_setting(num_layers, offset, stages, chunks, recompute, {pattern: select})

    ours_full = [layer.layer for layer in plan.layers if layer.full_recompute]
    assert ours_full == [layer for layer in range(num_layers) if theirs._check_layer_rule(layer)]
    lines = formative_lines(plan)
    assert lines[0] == f"Formative layer_recompute: {theirs.layer_recompute}"
    assert lines[1] == f"Formative select_recompute: {{'{pattern}': {theirs.select_recompute[pattern]}}}"
    assert [layer.stage for layer in plan.layers] == [int(stage) for stage in theirs.pp_ids]
    assert [layer.chunk for layer in plan.layers] == [int(chunk) for chunk in theirs.interleave_ids]
