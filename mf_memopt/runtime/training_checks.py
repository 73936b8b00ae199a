"""The training sections MindFormers' Trainer reads, checked before the model is built.

MindFormers looks each `type:` up in its registry only when it builds that component, after
the model was built and the plan applied, and then fails with a bare KeyError. Here every
`type:` of the optimizer, lr schedule, wrapper, callbacks and dataset is checked against the
registry first, with a did-you-mean, and the backend's limits (the model family's) and the dataset
file are checked too; one ConfigError lists every problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..apply.family import backend_of
from ..config.load import Document
from ..document.errors import ConfigIssue, did_you_mean
from ..document.source import KeyPath, Source
from .data import DATASET_DIR, GENERATED

# (key path of a `type:`, MindFormers registry it names)
TYPED_SECTIONS = (
    (("trainer", "type"), "trainer"),
    (("optimizer", "type"), "optimizer"),
    (("lr_schedule", "type"), "lr"),
    (("runner_wrapper", "type"), "wrapper"),
    (("runner_wrapper", "scale_sense", "type"), "wrapper"),
    (("train_dataset_task", "type"), "dataset"),
    (("train_dataset", "data_loader", "type"), "dataset_loader"),
)
PARALLEL_MODE = ("parallel", "parallel_mode")
CPU_PARALLEL_MODES = (0, "data_parallel", "DATA_PARALLEL", "stand_alone", "STAND_ALONE")


def training_issues(document: Document, *, device_target: str, use_parallel: bool,
                    dataset_dir: str | None = None) -> list[ConfigIssue]:
    """Everything the Trainer would trip over late, as ConfigIssues naming the key."""
    source = document.source
    issues = registry_issues(source)
    issues += backend_of(document.family).backend_issues(source.get(("model", "model_config")), device_target, source)
    issues += _dataset_issues(source, dataset_dir)
    if device_target == "CPU" and use_parallel:
        issues += _cpu_parallel_issues(source)
    return issues


def registry_issues(source: Source) -> list[ConfigIssue]:
    from mindformers.tools.register import MindFormerRegister

    issues = []
    if source.get(("trainer", "type")) is None:
        issues.append(source.issue(("trainer",), "names no trainer type, so MindFormers cannot train",
                                   "e.g. trainer: {type: CausalLanguageModelingTrainer, model_name: llama}"))
    for path, module_type in _typed_paths(source):
        name = source.get(path)
        if name is None:
            continue
        known = MindFormerRegister.registry.get(module_type, {})
        if not isinstance(name, str) or name not in known:
            hint = did_you_mean(str(name), known) or f"registered {module_type} types: {_sample(known)}"
            issues.append(source.issue(path, f"{name!r} is not a MindFormers {module_type} type", hint))
    return issues


def _typed_paths(source: Source) -> list[tuple[KeyPath, str]]:
    paths = list(TYPED_SECTIONS)
    callbacks = source.get(("callbacks",)) or []
    if isinstance(callbacks, list):
        paths += [(("callbacks", index, "type"), "callback") for index in range(len(callbacks))]
    return paths


def _sample(names: Any, limit: int = 12) -> str:
    public = sorted(name for name in names if name[:1].isupper())
    more = f", ... ({len(public) - limit} more)" if len(public) > limit else ""
    return ", ".join(public[:limit]) + more


def _dataset_issues(source: Source, dataset_dir: str | None) -> list[ConfigIssue]:
    target = dataset_dir or source.get(DATASET_DIR)
    if not isinstance(target, str) or Path(target).exists() or source.has(GENERATED):
        return []
    where = "--train_dataset_dir" if dataset_dir else "this path"
    return [source.issue(DATASET_DIR, f"{target} does not exist ({where})",
                         f"write a token file there with `python -m mf_memopt.data {source.file}`, or add "
                         "`generated_dataset: {num_samples: 32, seed: 0}` to have the launcher write it")]


def _cpu_parallel_issues(source: Source) -> list[ConfigIssue]:
    mode = source.get(PARALLEL_MODE)
    if mode is None or mode in CPU_PARALLEL_MODES:
        return []
    return [source.issue(PARALLEL_MODE, f"is {mode!r}: semi-auto and auto parallel need Ascend or GPU "
                                        "(MindSpore: 'Invalid communication backend: CPU')",
                         "set parallel.parallel_mode: 0 (data parallel) on CPU")]
