"""A pattern resolves against the model as Ascend builds it: where Ascend has a primitive and CPU a stand-in cell
under the same name (`models/mcore/cpu_kernels.py`), a setting that marks operators marks the stand-in's. So a YAML
that `validate` accepts is not refused at apply on CPU: `select_comm_recompute: True` (MindFormers' default pattern
`.*\\.norm`, an RmsNorm primitive on Ascend) compiles into the tiny DeepSeek-V3's graph with the marks on the
stand-ins' operators (and trains: test_moe_launcher.py)."""

from __future__ import annotations

from pathlib import Path

import yaml


ROOT = Path(__file__).resolve().parents[2]


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
