"""Fake cells and primitives with the attributes mf_memopt uses, shaped like MindFormers' Llama layer."""

from __future__ import annotations


class FakePrim:
    def __init__(self, kind: str):
        self.kind = kind
        self.attrs: dict = {}

    def recompute(self, mode: bool = True):
        return self.add_prim_attr("recompute", mode)

    def add_prim_attr(self, name, value):
        # Like MindSpore: the attribute also lands in the instance dict, shadowing a method
        # of the same name (a second `prim.recompute(...)` call then fails).
        self.__dict__[name] = value
        self.attrs[name] = value
        return self

    def _offload(self, backward_prefetch="Auto"):
        self.add_prim_attr("offload", True)
        return self.add_prim_attr("backward_prefetch", backward_prefetch)


class FakeCell:
    def __init__(self, kind: str, prims: list[str] = (), **children: FakeCell):
        self.kind = kind
        self._primitives = {name: FakePrim(name) for name in prims}
        self._cells = dict(children)
        self._has_config_recompute = False
        self.recompute_calls: list[dict] = []

    def recompute(self, **kwargs):
        self.recompute_calls.append(kwargs)
        self._mark()

    def _mark(self):
        # Like Cell._recompute: the cell and every cell below it count as configured.
        self._has_config_recompute = True
        for child in self._cells.values():
            child._mark()

    def __getattr__(self, name):
        cells = self.__dict__.get("_cells", {})
        prims = self.__dict__.get("_primitives", {})
        if name in cells:
            return cells[name]
        if name in prims:
            return prims[name]
        raise AttributeError(name)


NORM = ["cast", "mul", "mul2", "square", "mean", "add", "rsqrt"]
LINEAR = ["matmul", "cast", "reshape", "shape"]
ATTENTION = ["shape", "reshape", "cast", "transpose", "merger_head_transpose", "batch_matmul",
             "batch_matmul_q_k", "mul", "add", "softmax", "cast_attn", "tile_kv"]


def llama_layer(flash_attention: bool = False) -> FakeCell:
    """The cells and primitive names of MindFormers 1.9's LLamaDecodeLayer (CPU settings)."""
    attention = dict(wq=FakeCell("Linear", LINEAR), wk=FakeCell("Linear", LINEAR), wv=FakeCell("Linear", LINEAR),
                     wo=FakeCell("Linear", LINEAR), apply_rotary_emb=FakeCell("RotaryEmbedding", ["add", "mul"]))
    if flash_attention:
        attention["flash_attention"] = FakeCell("FlashAttention", ["flash_attention"])
    return FakeCell(
        "LLamaDecodeLayer", ["cast", "shape", "reshape", "add"],
        ffn_norm=FakeCell("LlamaRMSNorm", NORM),
        attention_norm=FakeCell("LlamaRMSNorm", NORM),
        attention=FakeCell("LLamaAttention", ATTENTION, **attention),
        feed_forward=FakeCell("LlamaFeedForward", ["mul", "cast", "reshape", "w13_concat"],
                              w1=FakeCell("Linear", LINEAR, activation=FakeCell("LlamaSiLU", ["silu"])),
                              w2=FakeCell("Linear", LINEAR), w3=FakeCell("Linear", LINEAR)))


def llama_model(num_layers: int, flash_attention: bool = False) -> FakeCell:
    layers = FakeCell("CellList", [], **{str(index): llama_layer(flash_attention) for index in range(num_layers)})
    return FakeCell("LlamaForCausalLM", [], model=FakeCell("LlamaModel", [], layers=layers),
                    lm_head=FakeCell("Linear", LINEAR))


def all_prims(cell: FakeCell, prefix: str = ""):
    for name, prim in cell._primitives.items():
        yield f"{prefix}{name}", prim
    for name, child in cell._cells.items():
        yield from all_prims(child, f"{prefix}{name}.")


def marks(cell: FakeCell) -> dict[str, dict]:
    """Every primitive path with the attributes set on it (unmarked ones left out)."""
    return {path: dict(prim.attrs) for path, prim in all_prims(cell) if prim.attrs}
