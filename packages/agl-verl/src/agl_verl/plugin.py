"""agl-verl's plugin: its algorithms under the names ``lightningrl-verl`` and ``sft-verl``.

Found by agl through the ``agl.plugins`` entry point; ``agl plugins`` lists them. Importing this
module loads neither verl nor torch (the algorithm modules import them when they run).
"""

from __future__ import annotations

from collections.abc import Mapping

import agl


@agl.hookimpl
def agl_algorithms() -> Mapping[str, type[agl.Algorithm]]:
    from agl_verl.rl import LightningRLVerl
    from agl_verl.sft import SFTVerl

    return {LightningRLVerl.name: LightningRLVerl, SFTVerl.name: SFTVerl}
