"""The process environment is read in one place and library code never exits the process: the launcher's preflight and the device check, which import MindSpore."""

from __future__ import annotations

import pytest

from mf_memopt.document.source import parse_yaml
from mf_memopt.runtime.errors import LaunchError


def test_pipeline_configs_on_cpu_are_refused_with_an_error_not_a_process_exit():
    from mf_memopt.config.load import load_document
    from mf_memopt.runtime.session import preflight

    source = parse_yaml("context:\n  device_target: CPU\nmodel:\n  model_config:\n    num_layers: 4\n"
                        "parallel_config:\n  pipeline_stage: 2\n", "pp.yaml")
    with pytest.raises(LaunchError, match="pipeline_stage is 2: MindSpore's CPU backend cannot compile pipeline "
                                          "parallelism"):
        preflight(load_document(source))


def test_checking_the_device_sets_nothing_and_never_falls_back():
    import mindspore as ms

    from mf_memopt.config.device import device_of
    from mf_memopt.runtime.device import require_loadable

    before = ms.get_context("device_target")
    require_loadable(device_of(parse_yaml("context:\n  device_target: CPU\n", "c.yaml")))
    with pytest.raises(LaunchError, match="context.device_target is Ascend, and this MindSpore cannot load it"):
        require_loadable(device_of(parse_yaml("context:\n  device_target: Ascend\n", "a.yaml")))
    assert ms.get_context("device_target") == before
