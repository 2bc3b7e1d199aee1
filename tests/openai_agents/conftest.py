"""Keep the Agents SDK's traces on this machine while these tests run.

By default the SDK exports every trace to OpenAI's servers (when ``OPENAI_API_KEY`` is set);
tests make no network calls, so its processors are taken out first (agl's is added beside
whatever is registered) and its default put back at the end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agents import set_trace_processors
from agents.tracing.processors import default_processor


@pytest.fixture(autouse=True, scope="session")
def no_trace_export_to_openai() -> Iterator[None]:
    set_trace_processors([])
    yield
    set_trace_processors([default_processor()])
