"""agl-agent-framework's plugin: the instrumentor ``agent-framework``.

Found by agl through the ``agl.plugins`` entry point; ``agl plugins`` lists it. Looking the
instrumentor up does not import the Agent Framework: it loads when it instruments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import agl

if TYPE_CHECKING:
    from agl.tracing import Instrumentor


@agl.hookimpl
def agl_instrumentors() -> Mapping[str, Callable[[agl.Tracer], Instrumentor]]:
    from agl_agent_framework.instrumentor import AgentFrameworkInstrumentor

    return {"agent-framework": AgentFrameworkInstrumentor}
