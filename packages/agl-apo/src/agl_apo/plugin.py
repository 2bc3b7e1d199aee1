"""agl-apo's plugin: the algorithm ``"apo"`` and the resource type ``"apo_state"``.

Found by agl through the ``agl.plugins`` entry point; ``agl plugins`` lists both. Importing this
module imports neither the algorithm nor the openai client (the hooks do, when called).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import agl


@agl.hookimpl
def agl_algorithms() -> Mapping[str, type[agl.Algorithm]]:
    from agl_apo.algorithm import APO

    return {APO.name: APO}


@agl.hookimpl
def agl_resource_types() -> Sequence[type[agl.Resource]]:
    from agl_apo.state import APOState

    return [APOState]
