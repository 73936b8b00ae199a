"""A refused `apply_plan` leaves the model as it was: every primitive object and every mark.

The model is MindFormers' tiny Qwen3-MoE as MindFormers builds it, whose routers share one gating-activation
object between the layers; mf_memopt's build copies it per layer, apply does not."""

from __future__ import annotations

import logging

import pytest
from mcore_differential import build, document, marks

from mf_memopt import apply_plan, load_plan
from mf_memopt.document.errors import ConfigError


def _state(network) -> dict[str, tuple[int, dict]]:
    """{path: (id of the primitive object, its attributes)} for every primitive of the network."""
    return {f"{path}.{name}": (id(primitive), dict(primitive.attrs))
            for path, cell in network.cells_and_names() for name, primitive in cell._primitives.items()
            if primitive is not None}


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    return build(document({}, "qwen3_moe", str(tmp_path_factory.mktemp("moe"))), ours=False)


def test_a_plan_refused_at_apply_leaves_every_primitive_object_and_mark_as_it_was(moe, tmp_path):
    # a dense Qwen3's plan: its `mlp.linear_fc1` is not in the MoE layer, which only apply can see
    plan = load_plan(document({"recompute": {"select_recompute": ["mlp\\.linear_fc1"]}}, "qwen3", str(tmp_path)))
    before, marked = _state(moe), marks(moe)
    with pytest.raises(ConfigError, match="matches nothing"):
        apply_plan(plan, moe, device_target="CPU")
    assert _state(moe) == before and marks(moe) == marked


def test_a_mark_on_an_operator_the_layers_share_is_refused_until_the_build_copies_it(moe, tmp_path):
    from mf_memopt.runtime.build import unshare_layers

    # with swap off, [2] is a per-stage count: the first two layers
    plan = load_plan(document({"recompute": {"select_recompute": {"mlp\\.router\\.gating_activation": [2]}}},
                              "qwen3_moe", str(tmp_path)))
    before = _state(moe)
    with pytest.raises(ConfigError, match="gating_activation of layer 0 is one operator object with layer") as raised:
        apply_plan(plan, moe, device_target="CPU")
    assert "unshare_layers" in raised.value.render() and _state(moe) == before
    assert unshare_layers(moe, plan.family, logging.getLogger("test").info) == ["mlp.router.gating_activation"]
    apply_plan(plan, moe, device_target="CPU")
    gating = {path: value for path, value in marks(moe).items() if path.endswith("gating_activation")}
    assert gating == {f"layers.{index}.mlp.router.gating_activation": {"recompute": True} for index in (0, 1)}
