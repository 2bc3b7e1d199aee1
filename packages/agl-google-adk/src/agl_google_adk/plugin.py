"""agl-google-adk's plugin: the instrumentor ``google-adk``.

Found by agl through the ``agl.plugins`` entry point; ``agl plugins`` lists it. Looking the
instrumentor up does not import ADK: it loads when it instruments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import agl

if TYPE_CHECKING:
    from agl.tracing import Instrumentor


@agl.hookimpl
def agl_instrumentors() -> Mapping[str, Callable[[agl.Tracer], Instrumentor]]:
    from agl_google_adk.instrumentor import GoogleADKInstrumentor

    return {"google-adk": GoogleADKInstrumentor}
