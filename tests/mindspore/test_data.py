"""The generated training data: learnable token sequences (NumPy arrays, which come with MindSpore) in a
MindRecord file MindSpore reads back."""

from __future__ import annotations

from pathlib import Path

from mf_memopt.runtime.data import main, synthetic_tokens

ROOT = Path(__file__).resolve().parents[2]


def test_every_token_has_one_successor_so_the_sequences_are_learnable():
    import numpy as np

    tokens = synthetic_tokens(16, 64, 50, seed=3)
    assert tokens.shape == (16, 65) and tokens.dtype == np.int32
    assert tokens.min() >= 1 and tokens.max() < 50            # 0 stays free for padding
    successors = {}
    for row in tokens:
        for current, following in zip(row[:-1], row[1:]):
            assert successors.setdefault(int(current), int(following)) == int(following)
    assert (synthetic_tokens(16, 64, 50, seed=3) == tokens).all()


def test_the_command_writes_a_small_mindrecord_file_that_mindspore_reads(tmp_path, capsys):
    import mindspore.dataset as ds
    import numpy as np

    target = tmp_path / "tokens.mindrecord"
    assert main([str(ROOT / "configs" / "llama_tiny.yaml"), "--out", str(target)]) == 0
    assert capsys.readouterr().out == (f"wrote 32 samples of 257 token ids (vocabulary 256) to {target}\n")
    assert target.stat().st_size < 100_000 and Path(f"{target}.db").exists()
    rows = [row["input_ids"] for row in ds.MindDataset(str(target), shuffle=False).create_dict_iterator(
        output_numpy=True)]
    assert (np.stack(rows) == synthetic_tokens(32, 256, 256, seed=1234)).all()
