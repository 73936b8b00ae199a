"""The loader: a training YAML read once, into the `Document` every later stage takes.

load (YAML + lines) -> family -> validate (schemas) -> layout -> normalise (rules) -> checks -> resolve
-> patterns against the family's recorded layer, where it has one.
Every stage adds to one list of issues; a YAML that reads but does not plan keeps them in its document
(`Document.planned` raises them together).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..document.errors import ConfigError, ConfigIssue, key_path, raise_if_errors, unique
from ..document.source import KeyPath, Source, load_source
from ..family import ModelFamily, family_of
from .checks import context_issues
from .device import device_issues
from .differences import differences
from .family_rules import rules_of
from .interactions import resolve
from .layer_check import layer_issues
from .layout import PIPELINE_STAGE, Layout, integral_offsets, layout_from
from .normalise import normalise
from .plan import Plan
from .schema import schema_issues


@dataclass(frozen=True, slots=True, kw_only=True)
class Document:
    """A YAML as the stages read it, read once (`load_document`): the family is chosen here and the plan made
    here; a command passes this value (or its parts: plan, layout, family) down, never the file again."""

    source: Source
    """As written (base_config merged)."""
    family: ModelFamily
    view: Source
    """As the family reads it: its own spellings presented in the common one."""
    spelling: tuple[ConfigIssue, ...]
    """What is wrong with the family's own spellings."""
    plan: Plan | None = None
    """The plan, conflicts resolved by the documented rules; None when the YAML has errors."""
    issues: tuple[ConfigIssue, ...] = ()
    """The errors that stop the plan, every one; empty when there is a plan."""

    @property
    def layout(self) -> Layout | None:
        return self.plan.layout if self.plan is not None else None

    def planned(self, *, strict: bool = False) -> Plan:
        """The plan, or one `ConfigError` with every problem; with `strict`, conflicts between rules are errors
        too instead of being resolved by the documented rules."""
        if self.plan is None:
            raise ConfigError(self.issues)
        if strict and self.plan.conflicts:
            raise ConfigError([_conflict_issue(self.source, conflict) for conflict in self.plan.conflicts])
        return self.plan


def load_document(config: str | Path | Mapping[str, Any] | Source | Document) -> Document:
    """The loader: a YAML file read through the guarded reader with its base_config followed (`load_source`;
    an unreadable file raises `ConfigError`), a mapping (no lines), or a `Source` already read (a YAML a
    command wrote in memory), with its family, view and plan. A `Document` is returned as it is."""
    if isinstance(config, Document):
        return config
    return read_document(config if isinstance(config, Source) else load_source(config))


def read_document(source: Source) -> Document:
    """The document of a YAML already read: its family (the only place it is chosen), the family's view of it,
    and its plan or the issues that stop it."""
    family = family_of(source)
    view, spelling = rules_of(family).view(source)
    document = Document(source=source, family=family, view=view, spelling=tuple(spelling))
    try:
        return replace(document, plan=_plan(document))
    except ConfigError as error:
        return replace(document, issues=error.issues)


def load_plan(config: str | Path | Mapping[str, Any], *, strict: bool = False) -> Plan:
    """Validate the YAML (a path, or an already-parsed mapping) and build its per-layer plan.

    Raises `ConfigError` listing every problem. With `strict`, conflicts between rules are
    errors too instead of being resolved by the documented rules.
    """
    return load_document(config).planned(strict=strict)


def plan_source(source: Source, *, strict: bool = False) -> Plan:
    """`load_plan` of a YAML already read (a `Source`, e.g. one written in memory)."""
    return read_document(source).planned(strict=strict)


# Top-level sections of MindFormers 2.x's PyNative trainer YAML (`TrainConfig` in mindformers/pynative/config/config.py)
# that the run_mindformer.py form mf_memopt reads has none of.
TRAIN_CONFIG_SECTIONS = ("training", "parallelism")


def _plan(document: Document) -> Plan:
    """The plan of a document; `ConfigError` with every problem that stops it."""
    raise_if_errors(other_form_issues(document.source))
    family = document.family
    source, cast = integral_offsets(document.view, family.keys)
    issues = [*source.warnings, *document.spelling, *cast, *schema_issues(source, family)]
    blocked = _blocker(issues)
    keys = family.keys
    layout_keys = (keys.num_layers, keys.interleave, keys.offset, PIPELINE_STAGE)
    layout = None if any(blocked(path) for path in layout_keys) else layout_from(source, keys, issues)
    issues += context_issues(source, family)
    issues += device_issues(source)
    issues += rules_of(family).model_issues(source)
    rules = normalise(source, layout, family, issues, blocked) if layout is not None else None
    issues = unique(issues)
    raise_if_errors(issues)
    assert layout is not None and rules is not None  # every path that yields None reports an error
    warnings = [issue for issue in issues if issue.severity == "warning"]
    plan = resolve(rules, layout, family=family, file=source.file, warnings=warnings)
    tree = rules_of(family).layer_tree(source)
    if tree is not None:
        found = unique(layer_issues(plan, tree))
        raise_if_errors(found)
        plan = replace(plan, warnings=(*plan.warnings, *found))
    return replace(plan, differences=tuple(differences(source, plan)))


def other_form_issues(source: Source) -> list[ConfigIssue]:
    """One issue for a MindFormers 2.x TrainConfig YAML (a `training:` or `parallelism:` section and no
    model.model_config), naming its form and the one mf_memopt reads, instead of every key that form lacks."""
    found = [key for key in TRAIN_CONFIG_SECTIONS if isinstance(source.get((key,)), Mapping)]
    if not found or source.has(("model", "model_config")):
        return []
    return [source.issue((found[0],), "this is a MindFormers 2.x TrainConfig YAML (the PyNative trainer's form: "
                         "training:, parallelism:, model:, recompute:); mf_memopt reads the run_mindformer.py form "
                         "(model.model_config, parallel_config, recompute_config, swap_config)",
                         "write the plan in a run_mindformer.py YAML of the same model")]


def _conflict_issue(source: Source, conflict) -> ConfigIssue:
    dropped = conflict.dropped.origin
    return ConfigIssue(file=dropped.file or source.file, line=dropped.line, path=dropped.key,
                       message=f"conflict (--strict): {conflict.message()}",
                       hint="remove the overlap so that each layer and operator is set by one rule")


def _blocker(issues: list[ConfigIssue]) -> Callable[[KeyPath], bool]:
    """Whether a key, its parent or its children already failed: such keys are not read further."""
    bad = [issue.path for issue in issues if issue.severity == "error"]

    def blocked(path: KeyPath) -> bool:
        text = key_path(path)
        return any(_related(text, other) for other in bad)

    return blocked


def _related(a: str, b: str) -> bool:
    short, long = sorted((a, b), key=len)
    return long == short or (long.startswith(short) and long[len(short)] in ".[") or short == ""
