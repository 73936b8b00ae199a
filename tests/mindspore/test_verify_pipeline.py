"""`verify` of a pipeline config, on real IR: each layer is checked in the graph of the rank whose stage holds it.

MindSpore's CPU backend cannot compile pipeline parallelism, so the graphs are compiled here where it can:
the tiny Llama by verify's own rank workers under msrun (`compile_ranks`, data parallel on 2 CPU workers: each
rank saves its IR in its own directory and writes its apply report), the tiny DeepSeek-V3 (5 layers and an MTP
layer) in one process. The graphs are then laid out as the ranks of a pipeline job hold them: rank r keeps the
nodes of the layers its stage holds (and of no other layer; the MTP layer on the last stage), as MindSpore's
pipeline split leaves a stage's graph. Which layers a stage holds is written out here as MindFormers assigns them
(measured in tests/mindspore/test_pipeline_precompile.py), not computed by the code under test.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from mf_memopt.cli import main
from mf_memopt.config.device import Device
from mf_memopt.config.load import load_plan
from mf_memopt.runtime.errors import LaunchError
from mf_memopt.verify import check, pipeline
from mf_memopt.verify.ir import find_validate_ir


ROOT = Path(__file__).resolve().parents[2]
_NODE = re.compile(r"^\s+%\d+\(")
_SCOPE = re.compile(r"# Fullname with scope: \((.*)\)")


def _yaml(tmp: Path, name: str, base: str, **changes) -> Path:
    data = yaml.safe_load((ROOT / "configs" / base).read_text())
    for key, value in changes.items():
        section, _, leaf = key.rpartition("__")
        target = data
        for part in section.split("__") if section else []:
            target = target.setdefault(part, {})
        target[leaf] = value
    path = tmp / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _lay_out(source: Path, target: Path, plan, keep: set[int], followers: bool) -> None:
    """Copy the IR file `source` to `target`, keeping the nodes of no decoder layer, of the layers in `keep`, and
    of the MTP layers when `followers`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    out, block = [], []

    def flush():
        scope = next((match.group(1) for line in block if (match := _SCOPE.search(line))), "")
        layer = plan.family.ir_layer_scope.search(scope)
        follower = plan.family.ir_follower_scope and plan.family.ir_follower_scope.search(scope)
        if (layer is None or int(layer.group(1)) in keep) and (not follower or followers):
            out.extend(block)
        block.clear()

    for line in source.read_text().splitlines(keepends=True):
        if _NODE.match(line):
            flush()
            block.append(line)
        elif not line.startswith(" "):
            flush()
            out.append(line)
        else:
            (block if block else out).append(line)      # a node's type and scope lines follow it
    flush()
    target.write_text("".join(out))


def _ranks(compiled: dict[int, Path], reports: dict[int, Path], plan, stages: list[set[int]], base: Path,
           followers_on: int) -> tuple[Path, Path]:
    """rank r's IR directory and report as verify reads them, rank r holding the layers `stages[r]`."""
    ir_dir, report_dir = base / "ir", base / "reports"
    report_dir.mkdir(parents=True)
    for rank, keep in enumerate(stages):
        source = find_validate_ir(compiled[rank])
        _lay_out(source, ir_dir / f"rank_{rank}" / source.name, plan, keep, rank == followers_on)
        shutil.copy(reports[rank], report_dir / f"rank_{rank}.json")
    return ir_dir, report_dir


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """The tiny Llama (feed_forward recomputed in every layer, attention_norm swapped in layer 3) compiled by
    verify's rank workers on 2 CPU workers, and the same model as a pipeline config with 2 stages."""
    base = tmp_path_factory.mktemp("llama")
    swap = {"swap": True, "op_swap": [{"op_name": "attention_norm", "backward_prefetch": 5, "layers": [3]}]}
    config = _yaml(base, "dp.yaml", "llama_tiny.yaml", swap_config=swap)
    pipeline.compile_ranks(config, base / "compiled", base / "reports", 2)
    pp = _yaml(base, "pp2.yaml", "llama_tiny.yaml", swap_config=swap, parallel_config__pipeline_stage=2,
               parallel_config__micro_batch_num=2)
    return {"plan": load_plan(pp), "config": pp, "compiled": {r: base / "compiled" / f"rank_{r}" for r in (0, 1)},
            "reports": {r: base / "reports" / f"rank_{r}.json" for r in (0, 1)}}


def _llama_ranks(llama, base: Path, stages=({0, 1}, {2, 3})) -> tuple[Path, Path]:
    return _ranks(llama["compiled"], llama["reports"], llama["plan"], list(stages), base, followers_on=1)


def test_each_layer_is_checked_in_the_graph_of_its_stages_rank(llama, tmp_path):
    ir_dir, reports = _llama_ranks(llama, tmp_path)
    checks, graphs = pipeline.check_ranks(llama["plan"], ir_dir, reports, 2)
    assert [(check.label, check.stage, check.rank) for check in checks] == [
        ("0", 0, 0), ("1", 0, 0), ("2", 1, 1), ("3", 1, 1)]
    assert [check.disagreements for check in checks] == [[]] * 4
    assert all(check.recompute == ["feed_forward"] and check.copies > 0 for check in checks)
    assert [sorted(check.offloaded) for check in checks] == [[], [], [], ["5"]]
    assert [(graph.rank, graph.stage, graph.layers) for graph in graphs] == [(0, 0, ["0", "1"]), (1, 1, ["2", "3"])]
    assert graphs[1].ir_path == f"rank_1/{find_validate_ir(llama['compiled'][1]).name}"
    assert graphs[0].nodes < sum(1 for line in find_validate_ir(llama["compiled"][0]).read_text().splitlines()
                                 if _NODE.match(line))                    # rank 0's graph holds its stage only


def test_a_rank_holding_another_stages_layers_disagrees(llama, tmp_path):
    ir_dir, reports = _llama_ranks(llama, tmp_path, stages=({2, 3}, {0, 1}))
    checks, _ = pipeline.check_ranks(llama["plan"], ir_dir, reports, 2)
    assert [(check.label, check.rank, check.disagreements[:1]) for check in checks] == [
        (label, rank, ["the graph has no operator of this layer"]) for label, rank in
        (("0", 0), ("1", 0), ("2", 1), ("3", 1))]


def test_a_mark_missing_from_one_stage_disagrees_there(llama, tmp_path):
    ir_dir, reports = _llama_ranks(llama, tmp_path)
    graph = find_validate_ir(ir_dir / "rank_1")
    graph.write_text(graph.read_text().replace("offload: Bool(1)", "offload: Bool(0)"))
    checks, _ = pipeline.check_ranks(llama["plan"], ir_dir, reports, 2)
    assert [bool(check.disagreements) for check in checks] == [False, False, False, True]
    assert checks[3].disagreements == ["swap_config.op_swap[0]: none of its 7 operators carries offload in the graph"]


def _cli(monkeypatch, llama, laid_out: tuple[Path, Path], *flags: str) -> int:
    """`python -m mf_memopt verify` on the pipeline config as on Ascend, its msrun compile replaced by the graphs
    laid out above."""
    monkeypatch.setattr(check, "preflight_compile", lambda config, plan: Device(target="Ascend", written=True))
    monkeypatch.setattr(check, "require_devices", lambda device, workers, config: None)

    def compiled(config, ir_dir, reports, workers):
        assert workers == 2
        shutil.copytree(laid_out[0], ir_dir, dirs_exist_ok=True)
        shutil.copytree(laid_out[1], reports, dirs_exist_ok=True)

    monkeypatch.setattr(check, "compile_ranks", compiled)
    return main(["verify", str(llama["config"]), *flags])


def test_verify_reports_each_stage_in_text_and_json(llama, tmp_path, monkeypatch, capsys):
    laid_out = _llama_ranks(llama, tmp_path)
    assert _cli(monkeypatch, llama, laid_out, "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["agrees"] is True
    assert result["stages"] == [{"stage": 0, "ranks": [0], "layers": ["0", "1"], "agrees": True},
                                {"stage": 1, "ranks": [1], "layers": ["2", "3"], "agrees": True}]
    assert [(layer["layer"], layer["stage"], layer["rank"]) for layer in result["layers"]] == [
        (0, 0, 0), (1, 0, 0), (2, 1, 1), (3, 1, 1)]
    graph = find_validate_ir(laid_out[0] / "rank_1")
    graph.write_text(graph.read_text().replace("offload: Bool(1)", "offload: Bool(0)"))
    assert _cli(monkeypatch, llama, laid_out) == 1
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith(f"{llama['config']}: compiled the training graphs of 2 ranks under msrun without "
                              "running them in ")
    assert text[1].split() == ["stage", "rank", "layer", "recompute", "(plan)", "recompute", "copies", "offloaded",
                               "ops", "by", "prefetch", "comm", "ops", "rule-2", "agrees"]
    assert text[5].split()[:3] == ["1", "1", "3"] and text[5].split()[-1] == "no"
    assert "disagreement: layer 3 (stage 1, rank 1): swap_config.op_swap[0]: none of its 7 operators carries " \
           "offload in the graph" in text
    assert f"stage 1: rank 1 read rank_1/{graph.relative_to(laid_out[0] / 'rank_1').as_posix()}" in text[-2]
    assert text[-1] == "the compiled graphs DISAGREE with the plan on stage 1; 0 rule-2 conflict(s)"


def test_a_rank_without_its_graph_is_one_line_naming_the_rank_and_file(llama, tmp_path, monkeypatch, capsys):
    laid_out = _llama_ranks(llama, tmp_path)
    shutil.rmtree(laid_out[0] / "rank_1")
    with pytest.raises(LaunchError, match=r"^rank 1 \(pipeline stage 1 of 2\) left no compiled graph: no "
                                          r"\*validate\*\.ir under .*/rank_1$"):
        pipeline.check_ranks(llama["plan"], *laid_out, 2)
    assert _cli(monkeypatch, llama, laid_out) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m mf_memopt verify: rank 1 (pipeline stage 1 of 2) left no "
                                               "compiled graph: no *validate*.ir under ")


def test_interleaved_stages_with_offsets_and_the_mtp_layer_on_the_last(tmp_path):
    """The tiny DeepSeek-V3 with 5 layers: 2 stages x 2 interleave chunks, offsets [[1, 0], [0, 0]] put layers
    0, 1, 3 on stage 0 and 2, 4 on stage 1, the MTP layer on the last stage (MindFormers' assignment, measured in
    test_pipeline_precompile.py)."""
    config = _yaml(tmp_path, "deepseek.yaml", "deepseek3_tiny.yaml", model__model_config__num_hidden_layers=5)
    check._compile(config, tmp_path / "compiled", tmp_path / "report.json")
    pp = _yaml(tmp_path, "pp.yaml", "deepseek3_tiny.yaml", parallel_config__pipeline_stage=2,
               parallel_config__micro_batch_num=2,
               parallel={"parallel_mode": 1, "full_batch": True,
                         "pipeline_config": {"pipeline_interleave": True, "pipeline_scheduler": "1f1b"}},
               model__model_config__num_hidden_layers=5, model__model_config__pp_interleave_num=2,
               model__model_config__offset=[[1, 0], [0, 0]])
    plan = load_plan(pp)
    compiled = {rank: tmp_path / "compiled" for rank in (0, 1)}
    reports = {rank: tmp_path / "report.json" for rank in (0, 1)}
    ir_dir, report_dir = _ranks(compiled, reports, plan, [{0, 1, 3}, {2, 4}], tmp_path / "laid_out", followers_on=1)
    checks, graphs = pipeline.check_ranks(plan, ir_dir, report_dir, 2)
    assert [(check.label, check.stage) for check in checks] == [
        ("0", 0), ("1", 0), ("3", 0), ("2", 1), ("4", 1), ("mtp.0", 1)]
    assert [check.disagreements for check in checks] == [[]] * 6
    assert all(check.copies > 0 for check in checks[:5])                  # every decoder layer's mlp recomputed
    # the MTP layer laid out on the first stage instead: missing on the last, which disagrees
    ir_dir, report_dir = _ranks(compiled, reports, plan, [{0, 1, 3}, {2, 4}], tmp_path / "wrong", followers_on=0)
    checks, _ = pipeline.check_ranks(plan, ir_dir, report_dir, 2)
    assert [(check.label, check.disagreements[:1]) for check in checks if check.disagreements] == [
        ("mtp.0", ["the graph has no operator of this layer"])]


def test_verify_needs_a_device_on_this_node_for_every_rank(tmp_path, monkeypatch):
    from mindspore import hal

    from mf_memopt.document.source import load_source

    config = _yaml(tmp_path, "671b.yaml", "deepseek3_tiny.yaml", parallel_config__data_parallel=4,
                   parallel_config__model_parallel=8, parallel_config__pipeline_stage=8)
    assert pipeline.workers_of(load_source(config)) == 256
    monkeypatch.setattr(hal, "device_count", lambda target: 8)
    with pytest.raises(LaunchError, match=r"^x.yaml: the layout needs 256 devices \(data_parallel x model_parallel x "
                                          r"context_parallel x pipeline_stage\) and verify runs every rank on this "
                                          r"node, which has 8 Ascend devices$"):
        pipeline.require_devices(Device(target="Ascend", written=True), 256, "x.yaml")
    pipeline.require_devices(Device(target="Ascend", written=True), 8, "x.yaml")


def test_a_rank_worker_that_stops_is_one_line_with_its_reason(tmp_path):
    """The worker is the launcher's run: a YAML error stops it, and verify says which worker and why."""
    data = yaml.safe_load((ROOT / "configs" / "llama_tiny.yaml").read_text())
    data.pop("generated_dataset")
    data["train_dataset"]["data_loader"]["dataset_dir"] = str(tmp_path / "missing.mindrecord")
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(LaunchError) as stopped:
        pipeline.compile_ranks(config, tmp_path / "ir", tmp_path / "reports", 2)
    message = str(stopped.value)
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith(f"{config}: compiling the pipeline stages under msrun failed: worker_")
    assert message.endswith(f"train_dataset.data_loader.dataset_dir: {tmp_path / 'missing.mindrecord'} does not "
                            f"exist (this path) (write a token file there with `python -m mf_memopt.data {config}`, "
                            "or add `generated_dataset: {num_samples: 32, seed: 0}` to have the launcher write it)")
