"""The conformance suites' guard (:func:`agl.testing._suite.check_suite_intact`) sees the tests
a suite is made of, its own and those of the parts it mixes in (the store suite's id part)."""

from __future__ import annotations

from typing import Any

import pytest

from agl.testing._store_ids import StoreIdRules
from agl.testing._suite import check_suite_intact
from agl.testing.store import StoreConformance


def test_a_test_of_a_suites_part_overridden_without_xfail_is_caught() -> None:
    class Quiet(StoreConformance):
        async def test_bad_ids_are_refused_naming_the_field(self, store: Any) -> None:
            """Passes whatever the store does."""

    with pytest.raises(AssertionError, match="overridden without"):
        check_suite_intact(Quiet(), StoreConformance, "store conformance suite")


def test_an_xfail_with_a_reason_is_allowed_and_the_suite_as_shipped_is_intact() -> None:
    class Honest(StoreConformance):
        @pytest.mark.xfail(reason="this backend keeps ids of any length")
        async def test_bad_ids_are_refused_naming_the_field(self, store: Any) -> None:
            raise AssertionError

    check_suite_intact(Honest(), StoreConformance, "store conformance suite")
    check_suite_intact(StoreConformance(), StoreConformance, "store conformance suite")
    assert "test_bad_ids_are_refused_naming_the_field" in vars(StoreIdRules)
