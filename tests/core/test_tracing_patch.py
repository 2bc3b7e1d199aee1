"""patch: one attribute replaced while instrumented, put back exactly, skipped when missing."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import pytest

from agl.tracing._patch import patch


class Base:
    def inherited(self) -> str:
        return "base"


class Owner(Base):
    def method(self) -> str:
        return "original"

    @staticmethod
    def static() -> str:
        return "static"


def test_the_wrapper_replaces_the_original_until_undo_closes() -> None:
    original = vars(Owner)["method"]
    with contextlib.ExitStack() as undo:
        assert patch(undo, Owner, "method", lambda f: lambda self: f"wrapped {f(self)}")
        assert Owner().method() == "wrapped original"
    assert vars(Owner)["method"] is original
    assert Owner().method() == "original"


def test_a_static_method_is_handed_over_as_it_is_defined() -> None:
    seen: list[Any] = []

    def wrap(original: Any) -> Any:
        seen.append(original)
        return staticmethod(lambda: "wrapped " + original.__func__())

    with contextlib.ExitStack() as undo:
        patch(undo, Owner, "static", wrap)
        assert Owner.static() == "wrapped static"
    assert isinstance(seen[0], staticmethod)
    assert vars(Owner)["static"] is seen[0]


def test_an_inherited_or_missing_attribute_is_skipped_with_the_warning_given(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with contextlib.ExitStack() as undo, caplog.at_level(logging.WARNING):
        assert not patch(undo, Owner, "inherited", lambda f: f, missing="no inherited here")
        assert not patch(undo, Owner, "gone", lambda f: f)
    assert "inherited" not in vars(Owner)
    assert [r.getMessage() for r in caplog.records] == ["no inherited here"]
