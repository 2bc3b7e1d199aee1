"""The store server's check for values no database keeps as they are."""

from __future__ import annotations

import math

from agl.store._storable import unstorable_at


def test_storable_values_pass() -> None:
    assert unstorable_at({"a": [1, 2.5, "ok", {"b": None, "c": True}], "ü": "ünï"}) is None


def test_the_first_unstorable_value_is_named_by_its_path() -> None:
    assert unstorable_at({"a": [1, "ok", {"b": "x\ud800"}]}) == (
        "a[2].b",
        "the text holds a lone UTF-16 surrogate (such as \\ud800)",
    )
    assert unstorable_at({"k\udc00": 1})[0] == "k\ufffd"  # type: ignore[index]
    assert unstorable_at(["\udfff"])[0] == "[0]"  # type: ignore[index]
    assert unstorable_at({"x": {"y": math.nan}}) == ("x.y", "nan is not a finite number")
    assert unstorable_at([1.0, -math.inf]) == ("[1]", "-inf is not a finite number")
