"""A short training run on generated tokens: loss and step time per step.

The data needs no download: a fixed random permutation of the vocabulary gives every
token its successor, and each sample follows it from a random first token. The next token
is thus predictable from the current one, and the loss visibly falls within a few steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .logs import LOGGER


@dataclass(frozen=True)
class StepRecord:
    step: int
    loss: float
    milliseconds: float


def synthetic_tokens(num_samples: int, seq_length: int, vocab_size: int, seed: int) -> np.ndarray:
    """`num_samples` sequences of `seq_length + 1` ids in 1..vocab-1 (0 is padding)."""
    rng = np.random.default_rng(seed)
    successor = np.zeros(vocab_size, dtype=np.int64)
    successor[1:] = rng.permutation(np.arange(1, vocab_size))
    tokens = np.empty((num_samples, seq_length + 1), dtype=np.int64)
    tokens[:, 0] = rng.integers(1, vocab_size, size=num_samples)
    for position in range(1, seq_length + 1):
        tokens[:, position] = successor[tokens[:, position - 1]]
    return tokens.astype(np.int32)


def batches(samples: np.ndarray, batch_size: int, rank: int, world_size: int):
    """Endless batches of this rank's share of the samples (data parallelism splits them)."""
    mine = samples[rank::world_size]
    if len(mine) < batch_size:
        raise ValueError(f"rank {rank} has {len(mine)} samples for a batch of {batch_size}: raise num_samples")
    while True:
        for start in range(0, len(mine) - batch_size + 1, batch_size):
            yield mine[start:start + batch_size]


def build_optimizer(section: dict[str, Any] | None, params: list) -> Any:
    from mindspore import nn

    section = dict(section or {})
    kind = section.pop("type", "AdamW")
    learning_rate = float(section.get("learning_rate", 1e-3))
    if kind in ("AdamW", "AdamWeightDecay", "FusedAdamWeightDecay"):
        beta1, beta2 = section.get("betas", (0.9, 0.999))
        return nn.AdamWeightDecay(params, learning_rate=learning_rate, beta1=beta1, beta2=beta2,
                                  eps=float(section.get("eps", 1e-8)),
                                  weight_decay=float(section.get("weight_decay", 0.0)))
    if kind == "SGD":
        return nn.SGD(params, learning_rate=learning_rate)
    raise ValueError(f"optimizer.type {kind} is not supported by the CPU launcher: use AdamW or SGD")


def train(network: Any, optimizer: Any, data, steps: int) -> list[StepRecord]:
    import mindspore as ms
    from mindspore import nn

    step_cell = nn.TrainOneStepCell(network, optimizer)
    step_cell.set_train(True)
    records = []
    for step in range(steps):
        batch = ms.Tensor(next(data))
        began = time.perf_counter()
        loss = float(step_cell(batch).asnumpy().reshape(-1)[0])
        record = StepRecord(step=step, loss=loss, milliseconds=(time.perf_counter() - began) * 1000)
        note = " (includes graph compilation)" if step == 0 else ""
        LOGGER.info(f"step {step + 1}/{steps}: loss {loss:.4f}, step time {record.milliseconds:.1f} ms{note}")
        records.append(record)
    return records
