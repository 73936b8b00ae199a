"""The JSON Schemas: valid 2020-12 schemas, self-describing, closed, and the ones the package uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from mf_memopt.schema import SCHEMA_NAMES, load_schema

ROOT = Path(__file__).resolve().parents[1]
SECTION_SCHEMAS = ("recompute_config", "swap_config")


def _walk(node, path=()):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, (*path, index))


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schema_is_valid_against_the_2020_12_metaschema(name):
    schema = load_schema(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_every_property_has_a_description(name):
    missing = [f"{'/'.join(map(str, path))}/{key}" for path, node in _walk(load_schema(name))
               if isinstance(node.get("properties"), dict)
               for key, prop in node["properties"].items() if "description" not in prop]
    assert missing == []


@pytest.mark.parametrize("name", SECTION_SCHEMAS)
def test_section_objects_are_closed(name):
    schema = load_schema(name)
    open_objects = [path for path, node in _walk(schema["$defs"])
                    if "properties" in node and node.get("additionalProperties") is not False]
    assert open_objects == []


def test_recompute_forms_switch_with_swap():
    schema = load_schema("recompute_config")
    assert schema["if"]["properties"]["swap_config"]["properties"]["swap"]["const"] is True
    assert schema["then"]["properties"]["recompute_config"]["$ref"] == "#/$defs/section_with_swap"
    assert schema["else"]["properties"]["recompute_config"]["$ref"] == "#/$defs/section_with_counts"


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_repository_schemas_are_the_packaged_ones(name):
    on_disk = json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text())
    assert on_disk == load_schema(name)
