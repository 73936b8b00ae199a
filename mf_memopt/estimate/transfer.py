"""Does the swap traffic hide behind compute? A per-stage timeline of one micro-batch.

Model (offload and release are decoupled; `backward_prefetch` sets how many
operators later the forward releases a swapped activation, and how many operators ahead
the backward starts copying it back):

* compute: a layer's forward takes forward_flops / throughput, its backward twice that
  plus the FLOPs it recomputes (Narayanan et al., SC'21, section 3.4: backward = 2 x forward);
* forward: after layer i's forward, its swapped bytes go device-to-host on one link
  (transfers queue). The release is due `backward_prefetch` operators later
  (operators_per_layer operators per layer); if the copy is not done by then, compute waits;
* backward: the copy back starts `backward_prefetch` operators before layer i's backward
  (on the other direction of the link); if it is not done when the backward starts,
  compute waits;
* a swapped activation whose release is due after the forward/backward turn never leaves
  the device (the last layer's never does: its backward starts at once); it costs no
  transfer time and stays in device memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from .effects import LayerEffect

# Meant to describe one Ascend 910B card; neither throughput nor the operator count has a source (no datasheet,
# nothing in MindSpore or MindFormers, nothing measured): docs/estimator.md, "Time figures".
DEFAULT_TFLOPS = 150.0
DEFAULT_HOST_GBPS = 25.0
UNSOURCED = ("the time figures assume 150 TFLOPS, 25 GB/s per direction to the host and 30 operators per layer "
             "by default, meant for one Ascend 910B card but read from no datasheet, source or measurement; "
             "give --tflops and --host-bandwidth measured on your cards")


@dataclass(frozen=True, slots=True, kw_only=True)
class Hardware:
    device_memory: int | None = None  # bytes; None: the YAML's budget (`budget.device_budget`)
    tflops: float = DEFAULT_TFLOPS  # sustained dense fp16/bf16 TFLOPS of one device
    host_gbps: float = DEFAULT_HOST_GBPS  # device<->host bandwidth per direction, GB/s
    operators_per_layer: int = 30   # forward operators of one decoder layer, to turn backward_prefetch into time
    # (method, GB/s): a compression method's compress + restore on one device, over its input's bytes, as measured
    # there; a method without a figure costs no time here (`estimate.core` notes it), and `auto` does not offer it
    codec_gbps: tuple[tuple[str, float], ...] = ()

    def seconds(self, flops: float) -> float:
        return flops / (self.tflops * 1e12)

    def codec_seconds(self, effect: LayerEffect) -> float:
        """A layer's compress and restore per micro-batch, for the methods this hardware has a figure for."""
        rates = dict(self.codec_gbps)
        return sum(nbytes / (rates[method] * 1e9) for method, nbytes in effect.codec if method in rates)

    def codec_figures(self) -> str:
        """`int8 40 GB/s, lossless 300 GB/s`: the codec figures given ("" without any)."""
        return ", ".join(f"{method} {rate:g} GB/s" for method, rate in self.codec_gbps)

    def codec_text(self) -> str:
        """`, codec int8 40 GB/s, lossless 300 GB/s` where there are codec figures; else nothing."""
        return f", codec {self.codec_figures()}" if self.codec_gbps else ""

    def added_seconds(self, effect: LayerEffect) -> float:
        """What a layer's plan adds to its backward per micro-batch: the FLOPs it recomputes and its codec."""
        return self.seconds(effect.recompute_flops) + self.codec_seconds(effect)

    def transfer(self, nbytes: float) -> float:
        return nbytes / (self.host_gbps * 1e9)


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerTransfer:
    layer: int
    nbytes: int
    transfer_s: float
    forward_s: float
    backward_s: float
    forward_stall_s: float
    backward_stall_s: float
    on_device_at_turn: bool


def swap_timeline(effects: list[LayerEffect], forward_flops: list[int], hardware: Hardware) -> list[LayerTransfer]:
    """One micro-batch through the layers of one stage (in forward order)."""
    forward = [hardware.seconds(flops) for flops in forward_flops]
    backward = [2 * seconds + hardware.added_seconds(effect) for seconds, effect in zip(forward, effects)]
    swapped = [effect.bytes("swapped") for effect in effects]
    windows = [_window(effect, seconds, hardware) for effect, seconds in zip(effects, forward)]
    resident = _resident(swapped, forward, windows, hardware)
    forward_stalls, _, turn = _forward(swapped, forward, windows, resident, hardware)
    backward_stalls = _backward(swapped, backward, effects, resident, hardware, turn)
    return [LayerTransfer(layer=effect.layer, nbytes=swapped[index], transfer_s=hardware.transfer(swapped[index]),
                          forward_s=forward[index], backward_s=backward[index],
                          forward_stall_s=forward_stalls[index], backward_stall_s=backward_stalls[index],
                          on_device_at_turn=resident[index])
            for index, effect in enumerate(effects)]


def _window(effect: LayerEffect, seconds: float, hardware: Hardware) -> float:
    operators = effect.prefetch_operators() or 0
    return operators * seconds / hardware.operators_per_layer


def _resident(swapped: list[int], forward: list[float], windows: list[float], hardware: Hardware) -> list[bool]:
    """Swapped layers whose release falls after the forward/backward turn never leave the device."""
    resident = [bool(nbytes) and index == len(swapped) - 1 for index, nbytes in enumerate(swapped)]
    while True:
        _, ends, turn = _forward(swapped, forward, windows, resident, hardware)
        more = [flag or (bool(nbytes) and end + window >= turn)
                for flag, nbytes, end, window in zip(resident, swapped, ends, windows)]
        if more == resident:
            return resident
        resident = more


def _forward(swapped: list[int], forward: list[float], windows: list[float], resident: list[bool],
             hardware: Hardware) -> tuple[list[float], list[float], float]:
    """Each layer's stall and the time its forward ends, and the forward/backward turn."""
    clock = link = 0.0
    stalls, ends = [], []
    for nbytes, seconds, window, stays in zip(swapped, forward, windows, resident):
        clock += seconds
        ends.append(clock)
        if not nbytes or stays:
            stalls.append(0.0)
            continue
        done = max(clock, link) + hardware.transfer(nbytes)
        link = done
        stalls.append(max(0.0, done - (clock + window)))
        clock += stalls[-1]
    return stalls, ends, clock


def _backward(swapped: list[int], backward: list[float], effects: list[LayerEffect], resident: list[bool],
              hardware: Hardware, turn: float) -> list[float]:
    clock, link = turn, turn
    stalls = [0.0] * len(swapped)
    for index in reversed(range(len(swapped))):
        if swapped[index] and not resident[index]:
            start = max(clock - _window(effects[index], backward[index], hardware), link)
            done = start + hardware.transfer(swapped[index])
            link = done
            stalls[index] = max(0.0, done - clock)
            clock += stalls[index]
        clock += backward[index]
    return stalls
