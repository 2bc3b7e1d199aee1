"""The store conformance suite: what every store backend must do, as pytest tests.

A backend passes by subclassing :class:`StoreConformance` and providing one fixture, ``store``,
that yields a fresh, empty store::

    import pytest
    from agl.testing.store import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        async def store(self, tmp_path):
            async with MyStore(tmp_path / "db") as store:
                yield store

Persistent backends set ``persistent = True`` and also provide ``reopen``: a fixture returning
an async function that closes the given store and opens the same data again.

Tests must not be deleted or overridden to make a backend pass. A test a backend cannot pass is
overridden with ``@pytest.mark.xfail(reason="…")`` naming what is missing;
``test_suite_is_intact`` fails otherwise. The suite runs on anyio's pytest plugin (asyncio).
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from agl.testing._store_attempts import StoreAttemptRules
from agl.testing._store_concurrency import StoreConcurrencyRules
from agl.testing._store_ids import StoreIdRules
from agl.testing._store_metrics import StoreMetricRules
from agl.testing._store_persistence import StorePersistenceRules
from agl.testing._store_resources import StoreResourceRules
from agl.testing._store_rollouts import StoreRolloutRules
from agl.testing._store_spans import StoreSpanRules
from agl.testing._store_statistics import StoreStatisticsRules
from agl.testing._suite import check_suite_intact

__all__ = ["StoreConformance"]


@pytest.mark.anyio
class StoreConformance(
    StoreRolloutRules,
    StoreAttemptRules,
    StoreSpanRules,
    StoreResourceRules,
    StoreMetricRules,
    StoreConcurrencyRules,
    StoreStatisticsRules,
    StorePersistenceRules,
    StoreIdRules,
):
    """Subclass me and provide a ``store`` fixture yielding a fresh, empty store.

    The tests live in one part per store concern (``agl.testing._store_*``), mixed in here.
    """

    persistent: ClassVar[bool] = False
    """Whether the backend keeps its data when closed and reopened (then ``reopen`` is needed)."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    def test_suite_is_intact(self) -> None:
        """No suite test was deleted, or overridden without an xfail that gives a reason."""
        check_suite_intact(self, StoreConformance, "store conformance suite")
