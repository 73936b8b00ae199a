"""The generated training data: the sizes a config must give (the tokens, NumPy arrays, which come with MindSpore,
and the MindRecord file: tests/mindspore/test_data.py)."""

from __future__ import annotations

import pytest

from mf_memopt.document.errors import ConfigError
from mf_memopt.config.load import load_document
from mf_memopt.document.source import parse_yaml
from mf_memopt.runtime.data import token_spec


def test_a_config_without_sizes_gets_one_error_naming_each_key():
    source = parse_yaml("generated_dataset: {num_samples: 0}\nmodel:\n  model_config:\n    vocab_size: 1\n",
                        "d.yaml")
    with pytest.raises(ConfigError) as caught:
        token_spec(load_document(source))
    assert caught.value.render().splitlines() == [
        "d.yaml: train_dataset.data_loader.dataset_dir: names no file to write (set it, or pass --out PATH)",
        "d.yaml:1: generated_dataset.num_samples: must be an integer >= 1, got 0",
        "d.yaml:3: model.model_config.seq_length: is missing: it sizes the generated tokens",
        "d.yaml:4: model.model_config.vocab_size: must be >= 2 to generate tokens"]
