"""The process environment is read in one place and library code never exits the process."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from mf_memopt.runtime import environment
from mf_memopt.runtime.errors import LaunchError
from mf_memopt.runtime.outputs import worker_output


def test_the_log_prefix_and_the_worker_directory_name_the_same_rank(monkeypatch, capsys):
    monkeypatch.setenv("MS_WORKER_NUM", "2")
    monkeypatch.setenv("RANK_ID", "1")
    monkeypatch.setenv("MS_NODE_ID", "0")        # a dry run: the rank differs from the node id
    monkeypatch.setattr(environment.LOGGER, "handlers", [])
    monkeypatch.setattr(environment.LOGGER, "level", logging.NOTSET)
    environment.configure_logging()
    environment.LOGGER.info("hello")
    directory = worker_output(Path("out"), use_parallel=False)
    assert "mf_memopt[rank 1]" in capsys.readouterr().out
    assert directory == Path("out/worker_1")


def test_pipeline_configs_on_ascend_need_the_distributed_launcher():
    from mf_memopt.config.device import Device
    from mf_memopt.runtime.device import require_pipeline_support

    ascend = Device(target="Ascend", written=True)
    require_pipeline_support(2, ascend, use_parallel=True, config="pp.yaml")
    require_pipeline_support(1, ascend, use_parallel=False, config="pp.yaml")
    with pytest.raises(LaunchError, match=r"pipeline_stage is 2: pipeline parallelism trains under msrun with "
                                          r"--use_parallel True \(MindFormers trains a stand-alone job with "
                                          r"pipeline_stage 1\)"):
        require_pipeline_support(2, ascend, use_parallel=False, config="pp.yaml")


def test_use_parallel_without_a_launcher_is_an_error_not_a_process_exit(monkeypatch):
    from mf_memopt.runtime.context import _require_launcher

    monkeypatch.delenv("MS_ROLE", raising=False)
    monkeypatch.delenv("RANK_TABLE_FILE", raising=False)
    with pytest.raises(LaunchError, match="needs a distributed launcher"):
        _require_launcher()


def test_verify_takes_a_pipeline_config_on_ascend_to_its_msrun_workers(monkeypatch, tmp_path):
    from mf_memopt.config.load import load_document
    from mf_memopt.runtime import device

    config = tmp_path / "pp.yaml"
    config.write_text("context:\n  device_target: Ascend\nmodel:\n  model_config:\n    num_layers: 4\n"
                      "parallel_config:\n  pipeline_stage: 2\n")
    monkeypatch.setattr(device, "require_loadable", lambda target: None)      # as on a machine with Ascend
    document = load_document(config)
    assert device.preflight_compile(document, document.planned()).target == "Ascend"
