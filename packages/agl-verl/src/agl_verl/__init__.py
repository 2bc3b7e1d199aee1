"""agl-verl: LightningRL and SFT on verl (FSDP, vLLM, Ray), from one GPU to many nodes.

The algorithm ``"lightningrl-verl"`` (:class:`LightningRLVerl`) trains with verl's engine while
agl's runners, gateway and store produce the rollouts; :func:`to_dataproto` is the bridge
from LightningRL transitions to verl's batch; :func:`build_config` / :func:`validate_config`
build and check verl's own configuration before any GPU work.
"""

from agl_verl.config import VerlConfigError, build_config, validate_config
from agl_verl.dataproto import to_dataproto
from agl_verl.rl import LightningRLVerl

__all__ = ["LightningRLVerl", "VerlConfigError", "build_config", "to_dataproto", "validate_config"]
