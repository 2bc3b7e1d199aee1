"""Settings objects: built checked, taken as an object, None or a mapping of their fields."""

from __future__ import annotations

import pytest

import agl
from agl import check_at_least, settings


def test_an_argument_is_the_object_none_or_a_mapping_of_its_fields() -> None:
    default = agl.LoopSettings(n_samples=8)
    given = agl.LoopSettings(n_epochs=3)
    assert settings("loop", None, default) is default
    assert settings("loop", given, default) is given
    # A mapping changes the default's fields (the algorithm's own default stays for the rest).
    assert settings("loop", {"n_epochs": 2}, default) == agl.LoopSettings(n_epochs=2, n_samples=8)


def test_a_wrong_argument_names_itself_and_what_it_takes() -> None:
    with pytest.raises(agl.InvalidInputError, match="loop must be a LoopSettings") as caught:
        settings("loop", 3, agl.LoopSettings())
    assert caught.value.field == "loop"
    with pytest.raises(agl.InvalidInputError, match=r"no field 'epochs' \(it has batch_size,"):
        settings("loop", {"epochs": 2}, agl.LoopSettings())
    # A mapping's values are checked as the constructor checks them.
    with pytest.raises(agl.InvalidInputError, match=r"LoopSettings\.n_epochs must be an integer"):
        settings("loop", {"n_epochs": 0}, agl.LoopSettings())


def test_sampling_settings_are_the_parameters_an_llm_resource_publishes() -> None:
    assert agl.SamplingSettings().parameters() == {"temperature": 1.0}
    sampling = agl.SamplingSettings(temperature=0.7, max_tokens=64)
    assert sampling.parameters() == {"temperature": 0.7, "max_tokens": 64}
    llm = agl.LLM(endpoint="http://x/v1", model="m", sampling_parameters=sampling.parameters())
    assert llm.sampling_parameters["max_tokens"] == 64
    with pytest.raises(agl.InvalidInputError, match="temperature must be a number >= 0"):
        agl.SamplingSettings(temperature=-1)
    with pytest.raises(agl.InvalidInputError, match="max_tokens must be an integer >= 1 or None"):
        agl.SamplingSettings(max_tokens=0)
    with pytest.raises(agl.InvalidInputError, match="got True"):
        agl.SamplingSettings(max_tokens=True)


@pytest.mark.parametrize(
    ("value", "options", "message"),
    [
        (0, {"above": True}, r"X.f must be a number > 0, got 0"),
        (1.5, {"integer": True}, r"X.f must be an integer >= 0, got 1.5"),
        (None, {}, r"X.f must be a number >= 0, got None"),
        ("1", {"optional": True}, r"X.f must be a number >= 0 or None, got '1'"),
    ],
)
def test_check_at_least_names_the_field_the_bound_and_the_value(
    value: object, options: dict[str, bool], message: str
) -> None:
    with pytest.raises(agl.InvalidInputError, match=message) as caught:
        check_at_least("X", "f", value, 0, **options)
    assert caught.value.field == "f"
    check_at_least("X", "f", None, 0, optional=True)
    check_at_least("X", "f", 0, 0)
