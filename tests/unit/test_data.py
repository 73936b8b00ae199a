"""The generated training data: learnable token sequences in a MindRecord file MindSpore reads back."""

from __future__ import annotations

from pathlib import Path

import pytest

from mf_memopt.config.errors import ConfigError
from mf_memopt.config.source import parse_yaml
from mf_memopt.runtime.data import main, synthetic_tokens, token_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.mindspore                       # the runtime's tokens are NumPy arrays, which come with MindSpore
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


def test_a_config_without_sizes_gets_one_error_naming_each_key():
    source = parse_yaml("generated_dataset: {num_samples: 0}\nmodel:\n  model_config:\n    vocab_size: 1\n",
                        "d.yaml")
    with pytest.raises(ConfigError) as caught:
        token_spec(source)
    assert caught.value.render().splitlines() == [
        "d.yaml: train_dataset.data_loader.dataset_dir: names no file to write (set it, or pass --out PATH)",
        "d.yaml:1: generated_dataset.num_samples: must be an integer >= 1, got 0",
        "d.yaml:3: model.model_config.seq_length: is missing: it sizes the generated tokens",
        "d.yaml:4: model.model_config.vocab_size: must be >= 2 to generate tokens"]


@pytest.mark.mindspore
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
