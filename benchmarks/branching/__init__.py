"""MindFormers' MFTrainOneStepCell with only its CPU overflow check replaced (for benchmarks/wrapper_branch.py).

It keeps MindFormers' `if not overflow: optimizer(grads)` branch, so the benchmark can show what
that branch does to recompute on CPU. Loaded by the launcher with `--register_path benchmarks/branching`.
"""

from mindformers.tools.register import MindFormerModuleType, MindFormerRegister
from mindformers.wrapper import MFTrainOneStepCell
from mindspore.nn.wrap.loss_scale import _ascend_grad_overflow


class BranchingCPUTrainOneStepCell(MFTrainOneStepCell):
    def get_overflow_status(self, status, compute_output):
        return self._get_distributed_overflow_status_on_infnan_mode(_ascend_grad_overflow, compute_output)


MindFormerRegister.register_cls(BranchingCPUTrainOneStepCell, MindFormerModuleType.WRAPPER)
