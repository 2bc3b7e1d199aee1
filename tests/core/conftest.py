"""Fixtures of the core tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agl.testing.processes import Processes


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    """``python -m agl …`` children started in ``tmp_path``, killed at the end."""
    with Processes(tmp_path) as started:
        yield started
