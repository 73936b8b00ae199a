"""JSON Schema validation of the YAML sections, with errors turned into `ConfigIssue`s.

The schemas (package data, also under the repository's `schemas/`) own the shape of the
sections. This module only explains their failures in the user's terms: where
(file, line, key path), what was expected, and a hint.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator, ValidationError
from jsonschema.validators import extend

from .errors import ConfigIssue, did_you_mean, unique
from .source import Source

SCHEMA_NAMES = ("training_layout", "recompute_config", "swap_config", "compress_config")
_SHAPE_VALIDATORS = {"type", "const", "enum"}


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


def schema_issues(source: Source) -> list[ConfigIssue]:
    """Every schema violation in the document, one issue per problem."""
    issues: list[ConfigIssue] = []
    for name in SCHEMA_NAMES:
        for error in _validator(name).iter_errors(source.data):
            issues.extend(_explain(source, error, expected=None))
    return unique(issues)


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
        hint = did_you_mean(key, known) or f"allowed keys: {', '.join(sorted(known))}"
        yield source.issue(tuple(path), f"unknown key `{key}`", hint)


def _leaf_issue(source: Source, error: ValidationError, expected: str | None) -> ConfigIssue:
    validator, value, instance = error.validator, error.validator_value, error.instance
    hint = _mode_hint(error)
    if validator == "type":
        wanted = error.schema.get("title") or expected or _type_words(value)
        message = f"expected {wanted}, got {_describe(instance)}"
    elif validator in ("minimum", "maximum"):
        message = f"must be {'>=' if validator == 'minimum' else '<='} {value}, got {instance}"
        hint = hint or (f"expected {expected}" if expected else None)
    elif validator == "const":
        message = f"must be {value!r}, got {_describe(instance)}"
        hint = did_you_mean(str(instance), [str(value)]) or hint
    elif validator == "enum":
        message = f"must be one of {', '.join(repr(v) for v in value)}, got {_describe(instance)}"
        hint = did_you_mean(str(instance), [str(v) for v in value]) or hint
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
    elif validator == "contains":
        message = f"expected {expected or 'a nested list'}, got {_describe(instance)}"
    else:
        message = error.message
    return _issue(source, error, message, hint)


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


def _describe(value: Any) -> str:
    kind = {bool: "bool", int: "integer", float: "float", str: "string", list: "list", dict: "mapping",
            type(None): "null"}.get(type(value), type(value).__name__)
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{kind} {shown}"
