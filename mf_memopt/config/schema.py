"""JSON Schema validation of the YAML sections, with errors turned into `ConfigIssue`s.

The schemas (package data, also under the repository's `schemas/`) own the shape of the
sections. This module only explains their failures in the user's terms: where
(file, line, key path), what was expected, and a hint.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator, ValidationError
from jsonschema.validators import extend

from ..document.errors import ConfigIssue, did_you_mean, shown, unique
from ..document.source import Source
from ..family import ModelFamily, families

SCHEMA_NAMES = ("training_layout", "recompute_config", "swap_config", "compress_config")   # every family's
_SHAPE_VALIDATORS = {"type", "const", "enum"}
_CAPS = {"maxItems", "maxProperties", "maxLength"}


def _is_strict_integer(_checker: Any, instance: Any) -> bool:
    # YAML `2.0` is a float; a layer count or index written that way is a mistake.
    return isinstance(instance, int) and not isinstance(instance, bool)


_StrictValidator = extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_strict_integer),
)


def load_schema(name: str) -> dict:
    text = resources.files("mf_memopt").joinpath("schemas", f"{name}.schema.json").read_text("utf-8")
    return json.loads(text)


@cache
def _validator(name: str) -> Draft202012Validator:
    return _StrictValidator(load_schema(name))


def schema_issues(source: Source, family: ModelFamily) -> list[ConfigIssue]:
    """Every schema violation in the document (the sections' and the model family's), one issue per problem."""
    issues: list[ConfigIssue] = []
    data = _bounded(source, source.data, (), issues)
    for name in (*SCHEMA_NAMES, family.schema):
        for error in _validator(name).iter_errors(data):
            issues.extend(_explain(source, error, expected=None))
    return unique(issues)


MAX_ENTRIES = 10_000      # no list of the checked sections needs more (num_layers <= 10000)
MAX_ITEMS = 2_000         # entries of other lists, in all
_INDICES = 16            # a list of non-negative integers validates like its first items
_SAMPLE = 256             # validating a list item by item is slow (jsonschema: ~10 us per item and branch)
_CAPPED_KEYS = {"select_recompute", "select_comm_recompute", "select_recompute_exclude",
                "select_comm_recompute_exclude", "op_name", "layer_swap", "op_swap"}   # schema maxItems <= 256


def model_schemas() -> tuple[str, ...]:
    """The schemas of the families' model keys, one per family."""
    return tuple(dict.fromkeys(family.schema for family in families()))


@cache
def _sections() -> frozenset[str]:
    """The top-level keys some schema describes (a schema added to SCHEMA_NAMES is covered at once)."""
    names = (*SCHEMA_NAMES, *model_schemas())
    return frozenset(key for name in names for key in load_schema(name).get("properties", {}))


class _Cut(list):
    """The first items of a list too long to validate item by item; `full` is its real length."""

    full = 0


class _CutDict(dict):
    full = 0


def _bounded(source: Source, value: Any, path: tuple, issues: list[ConfigIssue],
             budget: list[int] | None = None) -> Any:
    """The document as the validators see it: long lists shortened where that changes no verdict.

    A list of non-negative integers validates like its first items (no schema caps those
    lists); a list or mapping of a key the schema caps (patterns, swap entries) fails on its
    length whatever its items. Other lists are validated item by item, up to MAX_ITEMS items in
    all; beyond that the list is reported here instead.
    """
    budget = [MAX_ITEMS] if budget is None else budget
    if isinstance(value, dict):
        if path and path[-1] in _CAPPED_KEYS and len(value) > _SAMPLE:
            return _cut(_CutDict(list(value.items())[:_SAMPLE + 1]), len(value))
        if len(path) > 8:
            return value
        return {key: _bounded(source, item, (*path, key), issues, budget) if (path or key in _sections()) else item
                for key, item in value.items()}
    if not isinstance(value, list) or len(path) > 8:
        return value
    if len(value) > _SAMPLE and path[-1] in _CAPPED_KEYS:
        return _cut(_Cut(value[:_SAMPLE + 1]), len(value))
    if _INDICES < len(value) <= MAX_ENTRIES and all(type(item) is int and item >= 0 for item in value):
        return _cut(_Cut(value[:_INDICES]), len(value))
    budget[0] -= len(value)
    if len(value) > MAX_ENTRIES or budget[0] < 0:
        limit = f"at most {MAX_ENTRIES} entries" if len(value) > MAX_ENTRIES else \
            f"at most {MAX_ITEMS} entries in all besides layer indices"
        issues.append(source.issue(path, f"has {len(value)} entries; {limit} are allowed",
                                   "no key of these sections needs more (a model has at most 10000 layers)"))
        return []
    return [_bounded(source, item, (*path, index), issues, budget) for index, item in enumerate(value)]


def _cut(container, full: int):
    container.full = full
    return container


def _explain(source: Source, error: ValidationError, expected: str | None) -> Iterator[ConfigIssue]:
    if error.validator in ("oneOf", "anyOf"):
        yield from _explain_alternatives(source, error)
    elif error.validator == "additionalProperties":
        yield from _unknown_keys(source, error)
    else:
        yield _leaf_issue(source, error, expected)


def _explain_alternatives(source: Source, error: ValidationError) -> Iterator[ConfigIssue]:
    """Pick the alternative the user evidently meant, and explain its failure.

    Alternatives that reject the value's kind at this very spot (a list where a bool was
    expected) are set aside. If one alternative remains, its deepest failure is reported;
    otherwise the value is reported as not matching any of the accepted forms.
    """
    title = error.schema.get("title") or _expected_from_alternatives(error.schema)
    here = len(error.absolute_path)
    branches: dict[int, list[ValidationError]] = {}
    for sub in error.context or ():
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    viable = [subs for subs in branches.values() if not any(_rejects_kind(sub, here) for sub in subs)]
    capped = [subs for subs in viable if all(sub.validator in _CAPS for sub in subs)]
    if capped:  # the right form, only too long: say that, not why every item fails another form
        for sub in capped[0]:
            yield from _explain(source, sub, title)
        return
    if len(viable) == 1 or (viable and _single_deepest(viable)):
        chosen = max(viable, key=lambda subs: max(map(_relevance, subs)))
        for sub in chosen:
            yield from _explain(source, sub, title)
        return
    yield _issue(source, error, f"expected {title}, got {_describe(error.instance)}", _mode_hint(error))


def _single_deepest(viable: list[list[ValidationError]]) -> bool:
    depths = sorted((max(_relevance(sub) for sub in subs) for subs in viable), reverse=True)
    return len(depths) == 1 or depths[0] > depths[1]


def _relevance(error: ValidationError) -> tuple[int, int]:
    """Deeper failures first; at equal depth a wrong value beats a wrong kind."""
    return max((len(leaf.absolute_path), 0 if leaf.validator in _SHAPE_VALIDATORS else 1)
               for leaf in _leaves(error))


def _leaves(error: ValidationError) -> Iterator[ValidationError]:
    if error.context:
        for sub in error.context:
            yield from _leaves(sub)
    else:
        yield error


def _rejects_kind(error: ValidationError, depth: int) -> bool:
    if len(error.absolute_path) != depth:
        return False
    if error.validator in ("type", "contains"):  # `contains` tells 2-D count lists from 1-D ones
        return True
    if error.validator in ("const", "enum"):
        allowed = [error.validator_value] if error.validator == "const" else error.validator_value
        return all(type(value) is not type(error.instance) for value in allowed)
    if error.validator in ("oneOf", "anyOf"):
        return all(_rejects_kind(sub, depth) for sub in error.context or ())
    return False


def _expected_from_alternatives(schema: dict) -> str:
    forms = [branch.get("title") or branch.get("type") or branch.get("const") for branch in schema.get("oneOf", [])]
    return " or ".join(str(form) for form in forms if form is not None)


def _unknown_keys(source: Source, error: ValidationError) -> Iterator[ConfigIssue]:
    known = set(error.schema.get("properties", {}))
    for key in error.instance:
        if key in known:
            continue
        path = (*error.absolute_path, key)
        hint = did_you_mean(shown(key, 200), known) or f"allowed keys: {', '.join(sorted(known))}"
        yield source.issue(tuple(path), f"unknown key `{shown(key, 120)}`", hint)


def _leaf_issue(source: Source, error: ValidationError, expected: str | None) -> ConfigIssue:
    validator, value, instance = error.validator, error.validator_value, error.instance
    hint = _mode_hint(error)
    if validator == "type":
        wanted = error.schema.get("title") or expected or _type_words(value)
        message = f"expected {wanted}, got {_describe(instance)}"
    elif validator in ("minimum", "maximum", "exclusiveMinimum"):
        relation = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">"}[validator]
        message = f"must be {relation} {value}, got {_describe(instance, with_kind=False)}"
        hint = hint or _range_hint(error) or (f"expected {expected}" if expected else None)
    elif validator == "const":
        message = f"must be {value!r}, got {_describe(instance)}"
        hint = did_you_mean(_word(instance), [str(value)]) or hint
    elif validator == "enum":
        message = f"must be one of {', '.join(repr(v) for v in value)}, got {_describe(instance)}"
        hint = did_you_mean(_word(instance), [str(v) for v in value]) or hint
    elif validator == "required":
        missing = [key for key in value if key not in instance]
        message = f"missing required key `{missing[0]}`" if missing else error.message
        prop = error.schema.get("properties", {}).get(missing[0], {}) if missing else {}
        hint = prop.get("description")
    elif validator in ("minItems", "minProperties"):
        message = "must not be empty"
        hint = f"expected {expected}" if expected else None
    elif validator == "minLength":
        message = "must not be an empty string"
    elif validator in ("maxItems", "maxProperties"):
        noun = "entries" if validator == "maxItems" else "patterns"
        message = f"has {getattr(instance, 'full', 0) or len(instance)} {noun}; at most {value} are allowed"
        hint = "each entry costs matching and planning time; merge them into fewer patterns"
    elif validator == "maxLength":
        message = f"is {len(instance)} characters long; at most {value} are allowed"
    elif validator == "contains":
        message = f"expected {expected or 'a nested list'}, got {_describe(instance)}"
    else:
        message = shown(error.message, 200)
    return _issue(source, error, message, hint)


def _range_hint(error: ValidationError) -> str | None:
    if error.validator == "maximum" and error.validator_value == 2**63 - 1:
        return "MindSpore stores this value as a 64-bit signed integer"
    return None


def _issue(source: Source, error: ValidationError, message: str, hint: str | None) -> ConfigIssue:
    return source.issue(tuple(error.absolute_path), message, hint)


def _mode_hint(error: ValidationError) -> str | None:
    schema_path = list(error.absolute_schema_path)
    if schema_path[:1] == ["then"] and error.absolute_path and error.absolute_path[0] == "recompute_config":
        return ("swap_config.swap is true, so recompute keys take true/false or layer indices, "
                "not per-stage counts")
    return None


def _type_words(types: Any) -> str:
    names = {"integer": "an integer", "boolean": "true/false", "array": "a list", "object": "a mapping",
             "string": "a string", "null": "nothing (null)", "number": "a number"}
    if isinstance(types, str):
        types = [types]
    return " or ".join(names.get(name, name) for name in types)


def _word(value: Any) -> str:
    return value if isinstance(value, str) and len(value) <= 200 else _describe(value, with_kind=False)


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 60, 60, 60


def _describe(value: Any, *, with_kind: bool = True) -> str:
    """The value as a message shows it: bounded (it may be a huge aliased structure) and escaped."""
    kind = {bool: "bool", int: "integer", float: "float", str: "string", list: "list", dict: "mapping",
            type(None): "null"}.get(type(value), type(value).__name__)
    text = shown(_REPR.repr(value), 60)
    return f"{kind} {text}" if with_kind else text
