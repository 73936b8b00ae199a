"""A pipeline config on the launcher's Ascend path, on this machine, up to MindSpore's compile entry.

MindSpore's CPU backend cannot compile pipeline parallelism, so two msrun workers on CPU run
`pipeline_precompile.py`: MindFormers' build_context (semi-auto parallel, the YAML's stages), the model built
with MindFormers' stage assignment and its recompute/swap off, mf_memopt's plan applied, MindFormers' Trainer
(its pipeline cell, micro-batches, wrapper and dataset), stopped where MindSpore would compile. The workers are
started as `verify` starts its rank workers (its msrun command and environment). The test reads what each worker
would have compiled, and what verify would read from it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from mf_memopt.config.load import load_plan
from mf_memopt.runs.runner import msrun_command
from mf_memopt.runtime.session import stage_of
from mf_memopt.verify.pipeline import compile_env, stage_layers


ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "tests" / "children" / "pipeline_precompile.py"


def _llama_pp2(tmp_path: Path) -> Path:
    """The tiny Llama with 2 pipeline stages, 2 micro-batches, semi-auto parallel and per-stage full recompute."""
    data = yaml.safe_load((ROOT / "configs" / "llama_tiny.yaml").read_text())
    data["use_parallel"] = True
    data["parallel_config"].update(pipeline_stage=2, micro_batch_num=2)
    data["parallel"] = {"parallel_mode": 1, "gradients_mean": False, "full_batch": True,
                        "enable_parallel_optimizer": False}
    data["recompute_config"] = {"recompute": [1, 0], "select_recompute": {"feed_forward": [0, 1]}}
    data["train_dataset"]["data_loader"]["dataset_dir"] = str(tmp_path / "tokens.mindrecord")
    data["callbacks"] = [{"type": "MFLossMonitor"}]
    path = tmp_path / "llama_pp2.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _deepseek_pp2_interleaved(tmp_path: Path, scheduler: str) -> Path:
    """The tiny DeepSeek-V3 (mcore, MoE, one MTP layer) with 5 layers in 2 stages x 2 interleave chunks, offsets
    [[1, 0], [0, 0]], `scheduler`, 2 micro-batches and 2-D full-recompute counts."""
    data = yaml.safe_load((ROOT / "configs" / "deepseek3_tiny.yaml").read_text())
    data["use_parallel"] = True
    data["parallel_config"].update(pipeline_stage=2, micro_batch_num=2)
    data["parallel"] = {"parallel_mode": 1, "gradients_mean": False, "full_batch": True,
                        "enable_parallel_optimizer": False,
                        "pipeline_config": {"pipeline_interleave": True, "pipeline_scheduler": scheduler}}
    data["model"]["model_config"].update(num_hidden_layers=5, pp_interleave_num=2, offset=[[1, 0], [0, 0]])
    data["recompute_config"] = {"recompute": [[1, 0], [0, 1]], "select_recompute": False}
    data["train_dataset"]["data_loader"]["dataset_dir"] = str(tmp_path / "tokens.mindrecord")
    data["callbacks"] = [{"type": "MFLossMonitor"}]
    path = tmp_path / "deepseek3_pp2.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _run_workers(config: Path, tmp_path: Path) -> list[dict]:
    """The two workers, started with verify's msrun command and environment (its IR directory: tmp_path/ir)."""
    env = {**compile_env(tmp_path / "ir"), "GLOG_v": "3", "PYTHONPATH": str(ROOT)}
    out = tmp_path / "out"
    out.mkdir()
    command = msrun_command(2, tmp_path / "msrun", ["python", str(HARNESS), str(config), str(out)])
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    logs = "".join((tmp_path / "msrun" / f"worker_{rank}.log").read_text()[-3000:] for rank in (0, 1)
                   if (tmp_path / "msrun" / f"worker_{rank}.log").exists())
    assert done.returncode == 0, done.stdout[-2000:] + logs
    return [{**json.loads((out / f"rank_{rank}.json").read_text()),
             "worker_log": (tmp_path / "msrun" / f"worker_{rank}.log").read_text()} for rank in (0, 1)]


def _what_verify_reads(worker: dict, plan, tmp_path: Path) -> None:
    """Each rank saves its IR in its own directory and writes its apply report where verify reads it; the stage
    verify checks in that rank's graph is MindSpore's stage of the rank, and its layers are the ones MindFormers
    put on that stage."""
    rank = worker["rank"]
    assert worker["save_graphs_path"] == str((tmp_path / "ir" / f"rank_{rank}").resolve())
    assert worker["report_path"] == str(tmp_path / "out" / "reports" / f"rank_{rank}.json")
    assert json.loads(Path(worker["report_path"]).read_text()) == worker["report"]
    stage = stage_of(rank, worker["world_size"], plan.layout.stages)
    assert stage == worker["mindspore_stage"] == rank
    assert stage_layers(plan, stage) == [layer for layer, held in enumerate(worker["pipeline_stage"]) if held == stage]


def test_a_llama_pipeline_config_reaches_the_compile_as_mindformers_builds_it(tmp_path):
    config = _llama_pp2(tmp_path)
    plan = load_plan(config)
    workers = _run_workers(config, tmp_path)
    stages = [plan.layout.position(layer)[0] for layer in range(plan.num_layers)]
    assert stages == [0, 0, 1, 1]
    for rank, worker in enumerate(workers):
        assert worker["reached_compile"] and (worker["rank"], worker["world_size"]) == (rank, 2)
        _what_verify_reads(worker, plan, tmp_path)
        # MindFormers' Trainer: its pipeline wrapper, the pipeline cell with 2 micro-batches, around the model
        assert [(cell["type"], cell["micro_size"]) for cell in worker["cells"]] == [
            ("MFPipelineWithLossScaleCell", 2), ("_VirtualDatasetCell", None), ("PipelineCell", 2),
            ("DataOrderWrapperCell", None), ("LlamaForCausalLM", None)]
        assert worker["wrapper"] == "MFPipelineWithLossScaleCell"
        # the dataset: batch_size 2 times 2 micro-batches of seq_length + 1 tokens, one step's input
        assert (worker["batch_size"], worker["micro_batch_num"], worker["inputs"]) == (4, 2, [[4, 257]])
        # MindFormers' stage assignment is the plan's layout; the plan's marks are on the model it built
        assert worker["pipeline_stage"] == stages
        assert worker["layer_recompute"] == [layer.full_recompute is not None for layer in plan.layers] == [True] + [False] * 3
        assert worker["stage_line"].startswith(f"pipeline stage {rank} of 2 on rank {rank} of 2: layers "
                                               f"{', '.join(str(i) for i in range(2 * rank, 2 * rank + 2))} (")
        assert f" - INFO - {worker['stage_line']}" in worker["worker_log"]         # what the worker logs
        # what verify reads: the apply report, one entry per mark, and the seed's log lines
        report = worker["report"]
        assert report["device_target"] == "Ascend"
        assert {(entry["layer"], entry["path"]) for entry in report["set"]} >= {(0, ""), (2, "feed_forward")}
        assert "Formative layer_recompute: [[1, 0]]" in report["log"]
        assert "Set full recompute at layer 0" in report["log"]
        assert "Set select recompute at layer 2: feed_forward" in report["log"]


@pytest.mark.parametrize("scheduler", ["1f1b", "seqpipe"])      # seqpipe: the shipped DeepSeek-V3 671B's
def test_an_interleaved_deepseek_v3_with_offsets_and_mtp_reaches_the_compile(tmp_path, scheduler):
    config = _deepseek_pp2_interleaved(tmp_path, scheduler)
    plan = load_plan(config)
    workers = _run_workers(config, tmp_path)
    stages = [plan.layout.position(layer)[0] for layer in range(plan.num_layers)]
    assert stages == [0, 0, 1, 0, 1]              # chunk 0: 2 + 1 layers, chunk 1: 1 + 1 (the offsets)
    for rank, worker in enumerate(workers):
        assert worker["reached_compile"]
        _what_verify_reads(worker, plan, tmp_path)
        assert [(cell["type"], cell["micro_size"]) for cell in worker["cells"]] == [
            ("MFPipelineWithLossScaleCell", 2), ("_VirtualDatasetCell", None), ("PipelineCellWithMultiOutputs", 2),
            ("DataOrderWrapperCell", None), ("TrainingDeepseekV3ForCausalLM", None)]
        assert worker["inputs"] == [[4, 256], [4, 256]]            # input_ids and labels, 2 micro-batches of 2
        assert worker["pipeline_stage"] == stages
        assert worker["follower_stage"] == [1]                     # the MTP layer is on the last stage
        assert worker["layer_recompute"] == [True, False, False, False, True]
        assert worker["stage_line"].startswith(f"pipeline stage {rank} of 2 on rank {rank} of 2: layers "
                                               f"{['0, 1, 3', '2, 4'][rank]} (")
        assert f" - INFO - {worker['stage_line']}" in worker["worker_log"]
        report = worker["report"]
        assert [line for line in report["log"] if line.startswith("Set ")] == [
            "Set full recompute at layer 0", "Set full recompute at layer 4"]
        assert "Formative layer_recompute: [[1, 0], [0, 1]]" in report["log"]
        assert {(entry["layer"], entry["path"]) for entry in report["set"]} == {(0, ""), (4, ""), (4, "mtp.layers.0")}
