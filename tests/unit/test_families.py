"""Every registered family is one frozen value whose parts resolve and answer their Protocol."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from mf_memopt.apply.family import Backend
from mf_memopt.compress.family import Compression
from mf_memopt.config.family_rules import ConfigRules
from mf_memopt.estimate.family import Estimator
from mf_memopt.family import REGISTRY, ModelFamily, Part, families, family_named

PROTOCOLS = {"rules": ConfigRules, "backend": Backend, "estimator": Estimator, "compression": Compression}


def _unimplemented(part: object, protocol: type) -> list[str]:
    """The Protocol's methods whose body the part leaves as the Protocol's `...`: a part that subclasses its
    Protocol for the defaults would inherit them silently."""
    return [name for name, member in inspect.getmembers(protocol, inspect.isfunction) if not name.startswith("_")
            and getattr(type(part), name) is member and inspect.getsource(member).rstrip().endswith("...")]


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_part_of_a_registered_family_resolves_and_satisfies_its_protocol(name):
    family = family_named(name)
    assert isinstance(family, ModelFamily) and family.name == name
    with pytest.raises(dataclasses.FrozenInstanceError):
        family.name = "other"  # type: ignore[misc]
    assert {field.name for field in dataclasses.fields(family.parts)} == set(PROTOCOLS)
    for part_name, protocol in PROTOCOLS.items():
        part = getattr(family.parts, part_name).get()
        assert isinstance(part, protocol), f"{name}.{part_name}"
        assert _unimplemented(part, protocol) == [], f"{name}.{part_name}"


def test_the_registry_lists_each_family_once_and_refuses_an_unknown_name_with_the_names():
    assert [family.name for family in families()] == list(REGISTRY)
    with pytest.raises(KeyError, match="no model family 'gpt': the families are llama, mcore"):
        family_named("gpt")


def test_the_part_check_would_see_a_part_that_misses_a_method_or_answers_nothing():
    class Half:
        def view(self, source):
            return source, []

    assert not isinstance(Half(), ConfigRules)

    class Silent(Backend):
        pass

    assert isinstance(Silent(), Backend)          # the Protocol's defaults make it look whole ...
    assert _unimplemented(Silent(), Backend) == ["after_build", "backend_issues", "prepare_build"]   # ... it is not
    with pytest.raises(ModuleNotFoundError):
        Part("mf_memopt.models.no_such_family", "FAMILY").get()


def test_each_stage_reaches_a_part_through_its_accessor_which_refuses_a_part_of_the_wrong_kind():
    from mf_memopt.apply.family import backend_of
    from mf_memopt.compress.family import compression_of
    from mf_memopt.config.family_rules import rules_of
    from mf_memopt.estimate.family import estimator_of

    accessors = {"rules": rules_of, "backend": backend_of, "estimator": estimator_of, "compression": compression_of}
    for family in families():
        for part_name, accessor in accessors.items():
            assert isinstance(accessor(family), PROTOCOLS[part_name])
    llama = family_named("llama")
    crossed = dataclasses.replace(llama, parts=dataclasses.replace(llama.parts, estimator=llama.parts.compression))
    with pytest.raises(TypeError, match="llama's estimator part .* is not an Estimator"):
        estimator_of(crossed)
