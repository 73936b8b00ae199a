"""A small MindRecord file of generated token sequences, for training without a download.

`python -m mf_memopt.data CONFIG [--out PATH] [--num_samples N]` writes the file a training
YAML reads (`train_dataset.data_loader.dataset_dir`), sized from its model (`seq_length + 1`
ids per sample, ids below `vocab_size`) in the columns its family reads: a legacy model shifts
`input_ids` itself; an mcore model reads `input_ids` and the next tokens as `labels`. The launcher does the same on
first use when the YAML has a top-level `generated_dataset:` section
(`{num_samples, seed}`), so the shipped configs train from a fresh clone.

The tokens are learnable: a fixed random permutation of the vocabulary gives every token its
successor and each sample follows it from a random first token, so the loss visibly falls.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.load import Document, load_document
from ..document.errors import ConfigError, ConfigIssue
from ..document.source import Source

DATASET_DIR = ("train_dataset", "data_loader", "dataset_dir")
GENERATED = ("generated_dataset",)
COLUMN = "input_ids"


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenSpec:
    path: Path
    num_samples: int
    seq_length: int
    vocab_size: int
    seed: int
    columns: tuple[str, ...] = (COLUMN,)


def synthetic_tokens(num_samples: int, seq_length: int, vocab_size: int, seed: int) -> Any:
    """`num_samples` sequences of `seq_length + 1` ids in 1..vocab-1 (0 is padding)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    successor = np.zeros(vocab_size, dtype=np.int64)
    successor[1:] = rng.permutation(np.arange(1, vocab_size))
    tokens = np.empty((num_samples, seq_length + 1), dtype=np.int64)
    tokens[:, 0] = rng.integers(1, vocab_size, size=num_samples)
    for position in range(1, seq_length + 1):
        tokens[:, position] = successor[tokens[:, position - 1]]
    return tokens.astype(np.int32)


def write_mindrecord(spec: TokenSpec) -> Path:
    """Write the tokens as one MindRecord shard (`path` and its `path.db` index), atomically."""
    from mindspore.mindrecord import FileWriter

    spec.path.parent.mkdir(parents=True, exist_ok=True)
    tokens = synthetic_tokens(spec.num_samples, spec.seq_length, spec.vocab_size, spec.seed)
    with tempfile.TemporaryDirectory(dir=spec.path.parent, prefix=".tokens-") as scratch:
        staged = Path(scratch) / spec.path.name
        writer = FileWriter(str(staged), shard_num=1, overwrite=True)
        page, header = _page_and_header(tokens.nbytes)
        writer.set_page_size(page)
        writer.set_header_size(header)
        writer.add_schema({column: {"type": "int32", "shape": [-1]} for column in spec.columns}, "generated tokens")
        writer.write_raw_data([_sample(row, spec.columns) for row in tokens])
        writer.commit()
        # The index names the data file by its base name only, so both move together.
        os.replace(f"{staged}.db", f"{spec.path}.db")
        os.replace(staged, spec.path)
    return spec.path


def _sample(row: Any, columns: tuple[str, ...]) -> dict[str, Any]:
    """One sample: the whole sequence as `input_ids`, or `input_ids` and the ids one position on as `labels`."""
    if columns == (COLUMN,):
        return {COLUMN: row}
    return {COLUMN: row[:-1], "labels": row[1:]}


def _page_and_header(data_bytes: int) -> tuple[int, int]:
    """MindRecord's default 32 MiB page would make a small dataset a 50 MB file, and its header lists every
    page: pages of at least 32 KiB, grown (in powers of two) to keep them under about 256, and a header for them."""
    page = 1 << 15
    while data_bytes // page > 256 and page < 1 << 28:
        page <<= 1
    return page, 1 << 14 if page == 1 << 15 else 1 << 16


def token_spec(document: Document, *, path: str | Path | None = None, num_samples: int | None = None) -> TokenSpec:
    """What to generate for a YAML: its dataset path and model sizes; every problem in one ConfigError."""
    source = document.source
    issues: list[ConfigIssue] = []
    generated = source.get(GENERATED) or {}
    if not isinstance(generated, dict):
        issues.append(source.issue(GENERATED, "must be a mapping", "e.g. {num_samples: 32, seed: 1234}"))
        generated = {}
    target = path if path is not None else source.get(DATASET_DIR)
    if not isinstance(target, (str, Path)) or not str(target):
        issues.append(source.issue(DATASET_DIR, "names no file to write", "set it, or pass --out PATH"))
    family = document.family
    keys = family.keys
    values = {"seq_length": _int(source, keys.seq_length, None, issues),
              "vocab_size": _int(source, keys.vocab_size, None, issues),
              "num_samples": num_samples or _int(source, (*GENERATED, "num_samples"), 32, issues),
              "seed": _int(source, (*GENERATED, "seed"), 0, issues, minimum=0)}
    if values["vocab_size"] is not None and values["vocab_size"] < 2:
        issues.append(source.issue(keys.vocab_size, "must be >= 2 to generate tokens"))
    if issues:
        raise ConfigError(issues)
    return TokenSpec(path=Path(target), columns=family.dataset_columns, **values)


def _int(source: Source, path: tuple, default: int | None, issues: list, minimum: int = 1) -> int | None:
    value = source.get(path, default)
    if value is None:
        issues.append(source.issue(path, "is missing: it sizes the generated tokens"))
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        issues.append(source.issue(path, f"must be an integer >= {minimum}, got {value!r}"))
        return None
    return value


def ensure_dataset(document: Document, dataset_dir: str | None = None) -> Path | None:
    """The dataset path, generated first when the YAML asks for generated tokens and it is missing.

    Returns the generated path, or None when nothing was generated. Several workers of one
    job may call this at once: a lock next to the file lets exactly one of them write it.
    """
    source = document.source
    target = dataset_dir or source.get(DATASET_DIR)
    if not source.has(GENERATED) or not isinstance(target, str) or Path(target).exists():
        return None
    spec = token_spec(document, path=target)
    with _locked(spec.path):
        if spec.path.exists():
            return None
        return write_mindrecord(spec)


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mf_memopt.data", description=__doc__.splitlines()[0])
    parser.add_argument("config", help="training YAML (model.model_config gives seq_length and vocab_size)")
    parser.add_argument("--out", help="file to write (default: train_dataset.data_loader.dataset_dir)")
    parser.add_argument("--num_samples", type=int, help="samples (default: generated_dataset.num_samples, or 32)")
    args = parser.parse_args(argv)
    try:
        spec = token_spec(load_document(args.config), path=args.out, num_samples=args.num_samples)
    except ConfigError as error:
        print(error.render(), file=sys.stderr)
        return 1
    path = write_mindrecord(spec)
    print(f"wrote {spec.num_samples} samples of {spec.seq_length + 1} token ids (vocabulary {spec.vocab_size}) "
          f"to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
