"""Which pipeline stage a rank compiles, with data parallelism beside the pipeline, where `rank % stages` and
MindSpore's rule differ. MindSpore's rule, in the installed wheel: `mindspore/parallel/_utils.py`,
`_get_stage_device_num() = _get_device_num() // _get_pipeline_stages()`, and a rank's stage is
`rank_id // stage_device_num` (`mindspore/parallel/_parallel_serialization.py`, `dst_stage_id`;
`mindspore/parallel/_cell_wrapper.py`, `current_rank_stage_id`): the ranks of a stage are consecutive."""

from __future__ import annotations

from pathlib import Path

import pytest

from mf_memopt.config.load import load_plan
from mf_memopt.runtime.session import stage_line, stage_of
from mf_memopt.verify import pipeline

ROOT = Path(__file__).resolve().parents[2]
PP2 = ROOT / "configs" / "planning" / "llama2_7b_swap_pp2.yaml"      # 32 layers, pipeline_stage 2


@pytest.mark.parametrize(("world_size", "stages", "expected"), [
    (4, 2, [0, 0, 1, 1]),                           # data parallel 2
    (8, 2, [0, 0, 0, 0, 1, 1, 1, 1]),               # data parallel 4
    (8, 4, [0, 0, 1, 1, 2, 2, 3, 3]),               # data parallel 2
    (6, 3, [0, 0, 1, 1, 2, 2]),
    (2, 2, [0, 1]),
])
def test_the_ranks_of_a_stage_are_consecutive(world_size, stages, expected):
    assert [stage_of(rank, world_size, stages) for rank in range(world_size)] == expected


def test_the_worker_line_names_the_stage_of_its_block():
    layout = load_plan(PP2).layout
    assert stage_line(layout, 1, 4).startswith("pipeline stage 0 of 2 on rank 1 of 4: layers 0, 1, 2, ")
    assert stage_line(layout, 2, 4).startswith("pipeline stage 1 of 2 on rank 2 of 4: layers 16, 17, ")


def test_verify_checks_each_rank_graph_against_its_own_stage_layers(tmp_path, monkeypatch):
    """Four workers, two stages (data parallel 2): ranks 0 and 1 hold layers 0-15, ranks 2 and 3 layers 16-31. A
    mapping by `rank % stages` would check rank 1's graph against stage 1's layers."""
    ir_dir, reports = tmp_path / "ir", tmp_path / "reports"
    reports.mkdir()
    for rank in range(4):
        (reports / f"rank_{rank}.json").write_text("{}")
        (ir_dir / f"rank_{rank}").mkdir(parents=True)
        (ir_dir / f"rank_{rank}" / "graph_validate_0.ir").write_text("")
    checked = {}

    def check_graph(report, ir_path, plan, *, only, followers):
        checked[Path(ir_path).parent.name] = (min(only), max(only), followers)
        return [], 0

    monkeypatch.setattr(pipeline, "check_graph", check_graph)
    _, graphs = pipeline.check_ranks(load_plan(PP2), ir_dir, reports, 4)
    assert [(graph.rank, graph.stage) for graph in graphs] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert checked == {"rank_0": (0, 15, False), "rank_1": (0, 15, False), "rank_2": (16, 31, True),
                       "rank_3": (16, 31, True)}
