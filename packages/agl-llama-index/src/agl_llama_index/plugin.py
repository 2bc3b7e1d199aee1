"""agl-llama-index's plugin: the instrumentor ``llama-index`` (``instrument=["llama-index"]``).

Found by agl through the ``agl.plugins`` entry point; ``agl plugins`` lists it. Looking the
instrumentor up imports neither LlamaIndex nor openinference: they load when it instruments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import agl

if TYPE_CHECKING:
    from agl.tracing import Instrumentor


@agl.hookimpl
def agl_instrumentors() -> Mapping[str, Callable[[agl.Tracer], Instrumentor]]:
    from agl_llama_index.instrumentor import LlamaIndexInstrumentor

    return {"llama-index": LlamaIndexInstrumentor}
