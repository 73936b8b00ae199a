"""`compress_config` as rules: one per pattern, over a set of layers.

`compress_dense` is shorthand: level0 is a lossless `op_compress` of the family's dense
target in every layer (the MLP input with a lossless saving, see docs/compression.md);
level1 adds an offload of what the compressed cells keep (on Ascend; on CPU nothing moves).
"""

from __future__ import annotations

from ..compress.methods import DEFAULT_GROUP_SIZE
from ..document.source import KeyPath
from .reader import SectionReader
from .rules import COMPRESS, CompressRule

DENSE_METHOD = "lossless"
DENSE_OFFLOAD_PREFETCH = 1


def compress_rules(reader: SectionReader) -> tuple[CompressRule, ...]:
    section = reader.section(COMPRESS)
    if reader.blocked((*COMPRESS, "compress")):
        return ()
    if section.get("compress") is not True:
        reader.warn_ignored(COMPRESS, ("compress_dense", "op_compress"), (None, [], False), "compress",
                            "set compress_config.compress: true to compress activations")
        return ()
    rules = []
    dense = section.get("compress_dense", False)
    if dense and not reader.blocked((*COMPRESS, "compress_dense")):
        rules.append(_dense_rule(reader, dense))
    entries = [] if reader.blocked((*COMPRESS, "op_compress")) else reader.entries(COMPRESS, "op_compress")
    for entry, path in entries:
        rules += _op_rules(reader, entry, path)
    if not rules:
        reader.warn((*COMPRESS, "compress"), "compress is true but neither compress_dense nor op_compress is given: "
                    "nothing is compressed", "add compress_dense: level0 or op_compress entries")
    reader.reject_overlaps(rules, "compressed")
    return tuple(rules)


def _dense_rule(reader: SectionReader, level: str) -> CompressRule:
    return CompressRule(pattern=reader.family.defaults.compress_dense, method=DENSE_METHOD,
                        group_size=DEFAULT_GROUP_SIZE, layers=reader.every_layer(),
                        origin=reader.origin((*COMPRESS, "compress_dense")),
                        offload=DENSE_OFFLOAD_PREFETCH if level == "level1" else None, dense=True)


def _op_rules(reader: SectionReader, entry: dict, path: KeyPath) -> list[CompressRule]:
    layers = reader.listed_layers(entry["layers"], (*path, "layers"))
    group_size = entry.get("group_size", DEFAULT_GROUP_SIZE)
    if entry["method"] == "lossless" and "group_size" in entry:
        reader.warn((*path, "group_size"), "ignored: lossless compression has no groups", "remove group_size")
    return [CompressRule(pattern=name, method=entry["method"], group_size=group_size, layers=layers,
                         origin=reader.origin(path)) for name, _ in reader.op_names(entry, path)]
