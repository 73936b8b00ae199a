"""A pattern resolves against the model as Ascend builds it: where Ascend has a primitive and CPU a stand-in cell
under the same name (`models/mcore/cpu_kernels.py`), a setting that marks operators marks the stand-in's. So a YAML
that `validate` accepts is not refused at apply on CPU: `select_comm_recompute: True` (MindFormers' default pattern
`.*\\.norm`, an RmsNorm primitive on Ascend) trains the tiny DeepSeek-V3."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml


ROOT = Path(__file__).resolve().parents[2]
LOSS = re.compile(r"step:\[\s*(\d+)/\s*\d+\], loss:\[([\d.]+)/")


def test_a_stand_in_takes_the_operator_marks_on_every_operator_inside():
    from mf_memopt.apply import cells
    from mf_memopt.config.match import Match, Where, primitives_only
    from mf_memopt.config.rules import Origin
    from mf_memopt.models.mcore.cpu_kernels import CPURmsNorm

    norm = CPURmsNorm(1e-6)
    issues: list = []
    where = Where("x.yaml", Origin(path=("recompute_config", "select_comm_recompute"), line=1))
    (match,) = primitives_only([Match("input_layernorm.norm", "cell", norm)], "recompute_comm_op", 0, r".*\.norm",
                               where, issues)
    assert issues == [] and match.target == "primitive" and match.obj is norm
    cells.set_comm_recompute(norm, True)
    cells.recompute_primitive(norm, False)          # an exclude's mark
    operators = [primitive for _, cell in norm.cells_and_names() for primitive in cell._primitives.values()]
    assert len(operators) == 7
    assert all(primitive.attrs["recompute_comm_op"] is True for primitive in operators)
    assert all(primitive.attrs["recompute"] is False for primitive in operators)
    assert norm.attrs == {"recompute_comm_op": True, "recompute": False}
    assert not norm._has_config_recompute           # marked as an operator, not recomputed as a cell
    norm.recompute()                                # Cell.recompute, as select recompute of the name sets it
    assert norm._has_config_recompute


def test_a_plain_cell_is_still_refused_where_operators_are_marked():
    from mindspore import nn

    from mf_memopt.config.match import Match, Where, primitives_only
    from mf_memopt.config.rules import Origin

    issues: list = []
    where = Where("x.yaml", Origin(path=("recompute_config", "select_comm_recompute"), line=3))
    assert primitives_only([Match("mlp", "cell", nn.Cell())], "recompute_comm_op", 1, "mlp", where, issues) == []
    (issue,) = issues
    assert "names only cells in layer 1 (mlp)" in issue.message


def test_the_tiny_deepseek3_with_the_default_comm_pattern_trains_on_cpu(tmp_path):
    data = yaml.safe_load((ROOT / "configs" / "deepseek3_tiny.yaml").read_text())
    data["recompute_config"] = {"recompute": False, "select_recompute": False, "select_comm_recompute": True}
    config = tmp_path / "deepseek3_comm.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    output = tmp_path / "out"
    done = subprocess.run([sys.executable, str(ROOT / "run_mindformer_memopt.py"), "--config", str(config),
                           "--run_mode", "train", "--train_steps", "2", "--output_dir", str(output),
                           "--train_dataset_dir", str(output / "data" / "tokens.mindrecord")],
                          capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "GLOG_v": "3"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for index in range(4):
        assert f"Set select comm recompute at layer {index}: input_layernorm.norm, pre_mlp_layernorm.norm" \
               in done.stdout
    assert "Set select comm recompute: enorm.norm, hnorm.norm, final_layernorm.norm" in done.stdout
    losses = {int(step): float(loss) for step, loss in LOSS.findall(done.stdout)}
    assert sorted(losses) == [1, 2]


def test_verify_finds_the_comm_marks_on_the_stand_ins_operators(tmp_path):
    """The compiled graph has the mark on every operator inside each norm stand-in, and `verify` agrees."""
    from mf_memopt.verify.check import verify

    data = yaml.safe_load((ROOT / "configs" / "deepseek3_tiny.yaml").read_text())
    data["recompute_config"] = {"recompute": False, "select_recompute": False, "select_comm_recompute": True}
    data["output_dir"] = str(tmp_path / "out")
    config = tmp_path / "deepseek3_comm.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    result = verify(config)
    assert result.agrees, [check.disagreements for check in result.layers]
    # six operators inside each of the two norms of a decoder layer (the CPURmsNorm's, as compiled)
    assert [check.comm for check in result.layers[:4]] == [12] * 4
