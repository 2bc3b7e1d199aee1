"""agl-openai-agents' plugin: the instrumentor ``openai-agents`` (``instrument=["openai-agents"]``).

Found by agl through the ``agl.plugins`` entry point; ``agl plugins`` lists it. Looking the
instrumentor up imports neither the Agents SDK nor openinference: they load when it instruments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import agl

if TYPE_CHECKING:
    from agl.tracing import Instrumentor


@agl.hookimpl
def agl_instrumentors() -> Mapping[str, Callable[[agl.Tracer], Instrumentor]]:
    from agl_openai_agents.instrumentor import OpenAIAgentsInstrumentor

    return {"openai-agents": OpenAIAgentsInstrumentor}
