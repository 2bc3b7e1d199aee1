"""The Agent Framework sends no User-Agent prefix of its own to the test servers."""

from __future__ import annotations

import os

os.environ.setdefault("AGENT_FRAMEWORK_USER_AGENT_DISABLED", "true")
