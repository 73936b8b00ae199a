"""MindFormers' MoE routers add to Parameters during the forward: the expert load (with an expert bias; the
TopkBiasBalanceCallback moves the bias by it after the step) and `fi_accu` (with gbs_aux_loss; read by the next
forward until MFLossMonitor resets it). On CPU the training step adds the same values after the optimizer
(`cpu_wrapper.py`, 6.; `moe_kernels.CPUTopKRouter`), because a write before the optimizer cut the step in two and
full recompute stopped saving memory (`test_moe_launcher.py`).

Here: a router alone writes nothing in its forward and hands the step exactly what MindFormers' router writes
(and its outputs and weight gradients are MindFormers'); and trained through the launcher, each step of the tiny
DeepSeek-V3 and Qwen3-MoE ends with the same losses, gradient norms, router Parameters (read before the callbacks
zero them) and trained parameters as with MindFormers' own `TopKRouter`, which writes in its forward."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml


ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {"deepseek3": ROOT / "configs" / "deepseek3_tiny.yaml", "qwen3_moe": ROOT / "configs" / "qwen3_moe_tiny.yaml"}
FULL = {"recompute": True, "select_recompute": False, "select_comm_recompute": False}
STEPS = 3
ROUTER_PARAMETERS = ("expert_load", "fi_accu", "expert_bias")
DEFERRED_LOG = "are added after the optimizer instead"
MINDFORMERS_ROUTER = "mindformers.parallel_core.training_graph.transformer.moe.router.TopKRouter"
DEFERRING_ROUTER = "mf_memopt.models.mcore.moe_kernels.CPUTopKRouter"
# routers built alone: DeepSeek-V3's (sigmoid, expert bias, the best of two groups), Qwen3-MoE's (softmax,
# gbs_aux_loss) and one with both additions
ROUTERS = {
    "expert bias": {"moe_router_score_function": "sigmoid", "moe_router_enable_expert_bias": True,
                    "moe_router_num_groups": 2, "moe_router_group_topk": 1,
                    "moe_router_load_balancing_type": "seq_aux_loss"},
    "gbs_aux_loss": {"moe_router_score_function": "softmax", "moe_router_load_balancing_type": "gbs_aux_loss"},
    "both": {"moe_router_score_function": "sigmoid", "moe_router_enable_expert_bias": True,
             "moe_router_load_balancing_type": "gbs_aux_loss"},
}


# --- children ------------------------------------------------------------------------------------------------------
def _router_child(kind: str) -> dict:
    """MindFormers' router and mf_memopt's deferring one, same weights and tokens: outputs, Parameters after the
    forward, and the gradients (the deferred Parameters' included)."""
    import mindspore as ms
    import numpy as np
    from mindformers.parallel_core.training_graph.transformer.moe.router import TopKRouter
    from mindformers.parallel_core.transformer_config import TransformerConfig
    from mindspore import ParameterTuple, Tensor, nn, ops

    from mf_memopt.models.mcore.cpu_kernels import replace_cpu_kernels
    from mf_memopt.models.mcore.moe_kernels import CPUTopKRouter, deferrable_routers

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    config = TransformerConfig(num_layers=1, hidden_size=16, num_attention_heads=2, num_moe_experts=4,
                               moe_router_topk=2, add_bias_linear=False, seq_length=32, moe_router_dtype="float32",
                               params_dtype="float32", compute_dtype="float32", moe_aux_loss_coeff=0.01,
                               moe_router_topk_scaling_factor=1.5, norm_topk_prob=True,
                               **ROUTERS[kind])
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, 16)).astype(np.float32)
    start = {"expert_load": np.array([0.5, 0.25, 0.0, 1.0], np.float32),
             "fi_accu": np.array([0.1, 0.2, 0.3, 0.4], np.float32),       # the forward reads it (gbs)
             "expert_bias": np.array([0.01, -0.02, 0.0, 0.03], np.float32)}
    tokens = Tensor(rng.standard_normal((1, 64, 16)).astype(np.float32))

    class Objective(nn.Cell):
        def __init__(self, router):
            super().__init__()
            self.router = router

        def construct(self, x):
            index, coeff, aux = self.router(x)
            return aux + ops.reduce_sum(coeff * coeff), index, coeff, aux

    class First(nn.Cell):
        def __init__(self, objective):
            super().__init__()
            self.objective = objective

        def construct(self, x):
            return self.objective(x)[0]

    def router():
        built = TopKRouter(config)
        built.weight.set_data(Tensor(weight))
        replace_cpu_kernels(built)
        return built

    def reset(built):
        for name, value in start.items():
            if hasattr(built, name):
                getattr(built, name).set_data(Tensor(value))

    def values(built):
        return {name: getattr(built, name).asnumpy().tolist() for name in start if hasattr(built, name)}

    theirs, ours = router(), router()
    assert deferrable_routers(ours) == [""] and type(ours) is CPUTopKRouter
    deferred = ours.defer_parameter_additions()
    result = {"deferred": [parameter.name for parameter in deferred]}
    for name, built in (("theirs", theirs), ("ours", ours)):
        reset(built)
        outputs = Objective(built)(tokens)
        result[name] = {"outputs": [output.asnumpy().tolist() for output in outputs], "after_forward": values(built)}
    reset(theirs)
    weight_grad = ops.GradOperation(get_by_list=True)(First(Objective(theirs)), ParameterTuple([theirs.weight]))
    result["theirs"]["weight_grad"] = weight_grad(tokens)[0].asnumpy().tolist()
    reset(ours)
    grads = ops.GradOperation(get_by_list=True)(First(Objective(ours)), ParameterTuple([ours.weight, *deferred]))
    grads = grads(tokens)
    result["ours"]["weight_grad"] = grads[0].asnumpy().tolist()
    result["ours"]["after_grad"] = values(ours)
    # what the step's AssignAdd makes of each Parameter: its value before the step plus the handed gradient
    result["ours"]["added"] = {parameter.name.rsplit(".", 1)[-1]: (start[parameter.name.rsplit(".", 1)[-1]]
                                                                   + grad.asnumpy()).tolist()
                               for parameter, grad in zip(deferred, grads[1:])}
    result["start"] = {name: value.tolist() for name, value in start.items()}
    return result


class _RouterParameters:
    """A MindFormers callback, run first: every router Parameter at the end of each step, before the other
    callbacks move the expert bias, zero the expert load or reset fi_accu."""

    def __init__(self, path: str):
        self.path = path

    def on_train_step_end(self, run_context):
        network = run_context.original_args().train_network
        found = {parameter.name: parameter.asnumpy().tolist() for parameter in network.get_parameters()
                 if parameter.name.rsplit(".", 1)[-1] in ROUTER_PARAMETERS}
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(found, sort_keys=True) + "\n")
        routers = sorted({f"{type(cell).__module__}.{type(cell).__name__}" for _, cell in network.cells_and_names()
                          if "Router" in type(cell).__name__})
        Path(self.path).with_suffix(".classes").write_text(json.dumps(routers))


def _launch_child(writes: str, config: str, output: str) -> int:
    """The launcher in this process; with writes == "mindformers", the routers keep MindFormers' writes."""
    from mindformers.tools.register import MindFormerModuleType, MindFormerRegister
    from mindformers.trainer.base_trainer import BaseTrainer
    from mindspore.train.callback import Callback

    from mf_memopt.models.mcore import moe_kernels
    from mf_memopt.runtime.launch import main

    recorder = type("RouterParameters", (_RouterParameters, Callback), {})
    MindFormerRegister.register_cls(recorder, MindFormerModuleType.CALLBACK)
    # MindFormers runs its own callbacks first (MFLossMonitor, TopkBiasBalanceCallback, ...): the recorder goes first
    mindformers_order = BaseTrainer.sort_callbacks
    BaseTrainer.sort_callbacks = staticmethod(lambda callbacks: sorted(
        mindformers_order(callbacks), key=lambda callback: not isinstance(callback, recorder)))
    if writes == "mindformers":          # the routers stay MindFormers' own TopKRouter, writing in their forward
        moe_kernels.deferrable_routers = lambda network: []
    return main(["--config", config, "--run_mode", "train", "--train_steps", str(STEPS), "--output_dir", output,
                 "--train_dataset_dir", str(Path(output) / "data" / "tokens.mindrecord"),
                 "--record_steps", str(Path(output) / "steps.jsonl")])


# --- the tests -----------------------------------------------------------------------------------------------------
def _child(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], capture_output=True, text=True,
                          timeout=900, cwd=cwd, env={**os.environ, "GLOG_v": "3", "PYTHONPATH": str(ROOT),
                                                     "MF_MEMOPT_SUPERVISED": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@cache
def _router(kind: str, tmp: str) -> dict:
    return json.loads(_child("router", kind, cwd=Path(tmp)).stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("router_additions"))


@pytest.mark.parametrize("kind", ROUTERS)
def test_a_deferring_router_writes_nothing_in_its_forward_and_hands_the_step_what_mindformers_writes(kind, work):
    result = _router(kind, work)
    theirs, ours = result["theirs"], result["ours"]
    wanted = [name for name, asked in (("expert_load", ROUTERS[kind].get("moe_router_enable_expert_bias")),
                                       ("fi_accu", ROUTERS[kind]["moe_router_load_balancing_type"] == "gbs_aux_loss"))
              if asked]
    assert [name.rsplit(".", 1)[-1] for name in result["deferred"]] == wanted
    assert ours["outputs"] == theirs["outputs"]            # expert indices, coefficients, aux loss: bit for bit
    start = {name: value for name, value in result["start"].items() if name in ours["after_forward"]}
    assert ours["after_forward"] == ours["after_grad"] == start          # ours writes nothing, forward or backward
    for name in wanted:                                    # MindFormers' forward adds one step's count
        assert sum(theirs["after_forward"][name]) - sum(start[name]) == pytest.approx(1.0)
        assert ours["added"][name] == theirs["after_forward"][name]      # the step's addition: the same bits
    assert ours["weight_grad"] == theirs["weight_grad"]


@cache
def _trained(model: str, writes: str, tmp: str) -> tuple[list[dict], list[dict], str, list[str]]:
    """STEPS steps of the model with full recompute: the step records, the router Parameters, the log, the routers'
    classes."""
    output = Path(tmp) / f"{model}_{writes}"
    output.mkdir()
    data = yaml.safe_load(CONFIGS[model].read_text())
    data["recompute_config"] = FULL
    parameters = output / "router_parameters.jsonl"
    data["callbacks"] = [{"type": "RouterParameters", "path": str(parameters)},
                         *[callback for callback in data["callbacks"] if callback["type"] != "CheckpointMonitor"]]
    config = output / "config.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    done = _child("launch", writes, str(config), str(output), cwd=Path(tmp))
    records = [json.loads(line) for line in (output / "steps.jsonl").read_text().splitlines()]
    routers = [json.loads(line) for line in parameters.read_text().splitlines()]
    return records, routers, done.stdout + done.stderr, json.loads(parameters.with_suffix(".classes").read_text())


@pytest.mark.parametrize("model", CONFIGS)
def test_training_ends_every_step_as_with_mindformers_writes(model, work):
    theirs, their_routers, their_log, their_classes = _trained(model, "mindformers", work)
    ours, our_routers, our_log, our_classes = _trained(model, "deferred", work)
    assert their_classes == [MINDFORMERS_ROUTER] and our_classes == [DEFERRING_ROUTER]
    assert DEFERRED_LOG in our_log and DEFERRED_LOG not in their_log
    assert len(ours) == STEPS + 1 and ours == theirs       # losses, norms, scales; then every trained parameter
    assert len(our_routers) == STEPS and our_routers == their_routers
    added = "expert_load" if model == "deepseek3" else "fi_accu"
    for step in our_routers:                               # read before the callbacks: one step's count per router
        counts = {name: sum(value) for name, value in step.items() if name.endswith(added)}
        assert len(counts) >= 3 and all(count == pytest.approx(1.0) for count in counts.values()), counts
    if model == "deepseek3":                               # the callback moved the bias after the first step
        assert any(any(value) for name, value in our_routers[-1].items() if name.endswith("expert_bias"))


if __name__ == "__main__":
    if sys.argv[1] == "router":
        print(json.dumps(_router_child(sys.argv[2])))
        sys.exit(0)
    sys.exit(_launch_child(*sys.argv[2:]))
