"""CrewAI runs offline and writes nothing outside the test's own directories.

CrewAI sends anonymous telemetry and asks about its hosted tracing unless told not to, and keeps
task outputs in a SQLite file under the user's data directory (``XDG_DATA_HOME``): both are
switched off or moved to a temporary directory before CrewAI is imported.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"
os.environ["CREWAI_DISABLE_VERSION_CHECK"] = "true"


@pytest.fixture(scope="session", autouse=True)
def crewai_data_home() -> Iterator[None]:
    before = os.environ.get("XDG_DATA_HOME")
    with tempfile.TemporaryDirectory(prefix="agl-crewai-") as home:
        os.environ["XDG_DATA_HOME"] = home
        try:
            yield
        finally:
            if before is None:
                del os.environ["XDG_DATA_HOME"]
            else:
                os.environ["XDG_DATA_HOME"] = before
