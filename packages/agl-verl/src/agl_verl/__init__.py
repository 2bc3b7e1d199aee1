"""agl-verl: LightningRL and SFT on verl (FSDP, vLLM, Ray), from one GPU to many nodes.

The algorithm ``"lightningrl-verl"`` (:class:`LightningRLVerl`) trains with verl's engine while
agl's runners, gateway and store produce the rollouts; :func:`to_dataproto` is the bridge
from LightningRL transitions to verl's batch; :func:`build_config` / :func:`validate_config`
build and check verl's own configuration before any GPU work. The algorithm ``"sft-verl"``
(:class:`SFTVerl`) and :func:`train_sft` fine-tune with verl's SFT trainer on chat
conversations or on the best rollouts' exact token ids.
"""

from agl_verl.config import VerlConfigError, build_config, validate_config
from agl_verl.dataproto import to_dataproto
from agl_verl.rl import LightningRLVerl
from agl_verl.sft import SFTVerl, train_sft
from agl_verl.sft_settings import SFTSettings
from agl_verl.sft_trainer import SFTRun, VerlSFTError, build_sft_config, validate_sft_config

__all__ = [
    "LightningRLVerl",
    "SFTRun",
    "SFTSettings",
    "SFTVerl",
    "VerlConfigError",
    "VerlSFTError",
    "build_config",
    "build_sft_config",
    "to_dataproto",
    "train_sft",
    "validate_config",
    "validate_sft_config",
]
