"""agl-torch's plugin: its algorithms under the names ``lightningrl-torch`` and ``sft-torch``.

Found by agl through the ``agl.plugins`` entry point; ``agl plugins`` lists them. Importing this
module loads neither torch nor transformers (the algorithm modules import them when they run).
"""

from __future__ import annotations

from collections.abc import Mapping

import agl


@agl.hookimpl
def agl_algorithms() -> Mapping[str, type[agl.Algorithm]]:
    from agl_torch.rl import LightningRLTorch
    from agl_torch.sft import SFTTorch

    return {LightningRLTorch.name: LightningRLTorch, SFTTorch.name: SFTTorch}
