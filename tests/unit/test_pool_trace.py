"""benchmarks/pool_trace.py: replaying MindSpore's pool allocation log into the live set at the peak.

The log lines follow the format MindSpore 2.9 writes with `MS_SUBMODULE_LOG_v="{ME:0}"` (one alloc
and one free line copied from a real trace, with the fields the replay reads varied).
"""

from __future__ import annotations

from benchmarks.pool_trace import grouped, replay

_ALLOC = ("[DEBUG] ME(32389,7f736c857b80,python):2026-11-23-13:35:{time} [mindspore/ccsrc/runtime/hardware_abstract/"
          "kernel_base/kernel_tensor.cc:738] IncreaseNewRefCount] Op:Alloc memory increase new ref count for device "
          "address:0x562ed1e1e2d0 shape:{shape} type:Tensor[Float32] value:null flag:0 user data:0 need sync user "
          "data:0 managed by somas:0ref count:0x562ec9192950 origin ref count:1 ref count:1 dynamic ref count:"
          "2147483647 new ref count:1 is ptr persisted:0 dtype:{dtype} shape vector:{{4 }} format:-1 device address:"
          "0x562ec9c81ef0 device type:1 size:{size} device id:0 device name:CPU device point:0x562ed0116080 "
          "ptr:{ptr} from mem pool:{pool} deleter:1 node:{node} index:0 from persist mem:0 need recycle:0 padding type:")
_FREE = ("[DEBUG] ME(32389,7f72f56fa6c0,python):2026-11-23-13:35:{time} [mindspore/ccsrc/runtime/hardware_abstract/"
         "device_context/device_context.cc:131] FreeMemory] Free memory from device address:0x562ec726c4f0 ptr:{ptr}")
_NET = "Default/network-DataOrderWrapperCell/network-LlamaForCausalLM/model-LlamaModel/layers-CellList/{}-LLamaDecodeLayer"


def _alloc(time: str, ptr: str, size: int, node: str, shape: str = "(64, 64)", dtype: str = "Float32",
           pool: int = 1) -> str:
    return _ALLOC.format(time=time, ptr=ptr, size=size, node=node, shape=shape, dtype=dtype, pool=pool)


def _free(time: str, ptr: str) -> str:
    return _FREE.format(time=time, ptr=ptr)


def test_the_peak_is_the_largest_live_total_and_names_what_reached_it():
    lines = [
        _alloc("20.000.001", "0xa", 1024, _NET.format(0) + "/attention-LLamaAttention/Softmax-op0"),
        _alloc("20.000.002", "0xb", 3072, _NET.format(1) + "/attention-LLamaAttention/Softmax-op3"),
        _free("20.000.003", "0xa"),
        _alloc("20.000.004", "0xa", 512, "Default/optimizer-AdamW/Mul-op2"),      # the address is reused
        _alloc("20.000.005", "0xc", 1024, "Default/optimizer-AdamW/Mul-op7"),
        _free("20.000.006", "0xb"),
        "[INFO] PRE_ACT(1,2,python):2026-11-23-13:35:21.000.000 [mem_dynamic_allocator.cc:1211] "
        "DumpDynamicMemPoolStateInfo] The dynamic memory pool total allocated mem:0M, peak used mem:4M, ...",
    ]
    peak = replay(lines)
    assert peak.bytes == 4608 and peak.reached_by.node == "Default/optimizer-AdamW/Mul-op7"
    assert peak.reported_mib == 4
    assert grouped(peak) == [(3072, 1, "model-LlamaModel/layers/N-LLamaDecodeLayer/attention-LLamaAttention/Softmax "
                                       "(64, 64) Float32"),
                             (1536, 2, "Default/optimizer-AdamW/Mul (64, 64) Float32")]


def test_lines_are_replayed_in_time_order_and_host_tensors_are_left_out():
    """Worker threads write their lines out of order; blocks outside the pool (mem pool:0) are not counted."""
    lines = [
        _free("20.000.003", "0xa"),
        _alloc("20.000.001", "0xa", 2048, "Default/Cast-op1"),
        _alloc("20.000.002", "0xb", 512, "Default/Cast-op2"),
        _alloc("20.000.004", "0xd", 10**9, "inputs0", pool=0),
    ]
    peak = replay(lines)
    assert peak.bytes == 2560 and [block.node for block in peak.live] == ["Default/Cast-op1", "Default/Cast-op2"]


def test_each_block_takes_a_multiple_of_512_bytes_in_the_pool():
    """The pool rounds every block up to 512 bytes: a 4-byte scalar takes 512, 513 bytes take 1024. Without
    the rounding the replayed peak of a small model falls below the whole MiB MindSpore prints."""
    lines = [_alloc("20.000.001", "0xa", 4, "Default/data-1", shape="(1)"),
             _alloc("20.000.002", "0xb", 513, "Default/Cast-op1"),
             _alloc("20.000.003", "0xc", 2**20 - 512, "Default/Cast-op2"),
             "[INFO] PRE_ACT(1,2,python):2026-11-23-13:35:21.000.000 [mem_dynamic_allocator.cc:1211] "
             "DumpDynamicMemPoolStateInfo] The dynamic memory pool total allocated mem:0M, peak used mem:1M, ..."]
    peak = replay(lines)
    assert peak.bytes == 512 + 1024 + 2**20 - 512
    assert [block.size for block in peak.live] == [4, 513, 2**20 - 512]       # tensors keep their own size
    assert peak.inside(peak.reported_mib)                                        # 1 MiB + 512 B: inside "1M"
    assert not replay(lines[:2] + [lines[3]]).inside(1)                           # 1.5 KiB is not
