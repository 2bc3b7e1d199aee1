"""The plugin module the ``agl.plugins`` entry point names: what this distribution provides.

agl imports it the first time it needs plugins and calls its hooks once (see
:mod:`agl.hookspecs`). Hooks only return classes; anything heavy belongs in the algorithm.
"""

from __future__ import annotations

from collections.abc import Mapping

import agl


@agl.hookimpl
def agl_algorithms() -> Mapping[str, type[agl.Algorithm]]:
    from agl_best_of_n.algorithm import BestOfNAlgorithm

    return {BestOfNAlgorithm.name: BestOfNAlgorithm}
