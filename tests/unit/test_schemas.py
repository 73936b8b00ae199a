"""The JSON Schemas: valid 2020-12 schemas, self-describing, closed, and the ones the package uses."""

from __future__ import annotations

from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from mf_memopt.config.schema import SCHEMA_NAMES, load_schema, model_schemas

ROOT = Path(__file__).resolve().parents[2]
SECTION_SCHEMAS = ("recompute_config", "swap_config")
ALL_SCHEMAS = (*SCHEMA_NAMES, *model_schemas())


def _walk(node, path=()):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, (*path, index))


@pytest.mark.parametrize("name", ALL_SCHEMAS)
def test_schema_is_valid_against_the_2020_12_metaschema(name):
    schema = load_schema(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("name", ALL_SCHEMAS)
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


def test_every_schema_file_is_one_the_package_uses():
    """The packaged schemas folder holds exactly the schemas the config stage validates with."""
    folder = Path(load_schema.__code__.co_filename).parents[1] / "schemas"
    assert sorted(path.name.removesuffix(".schema.json") for path in folder.glob("*.schema.json")) == \
        sorted(ALL_SCHEMAS)


def test_the_repository_schemas_folder_is_the_package_one():
    """`schemas/` is a link to `mf_memopt/schemas/`, so the documented schemas cannot drift from the packaged ones."""
    assert (ROOT / "schemas").is_symlink()
    assert (ROOT / "schemas").resolve() == (ROOT / "mf_memopt" / "schemas").resolve()
