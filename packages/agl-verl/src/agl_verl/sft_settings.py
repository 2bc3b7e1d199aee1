"""How each round of verl's SFT trainer runs: :class:`SFTSettings`.

One frozen object, checked when built, taken by :func:`~agl_verl.train_sft` and
:class:`~agl_verl.SFTVerl` (``sft=SFTSettings(lr=1e-5, epochs=2)``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_args

from agl import InvalidInputError, check_at_least
from agl_verl.sft_trainer import Launcher

__all__ = ["SFTSettings"]


@dataclass(frozen=True)
class SFTSettings:
    """verl's SFT trainer, for one round.

    Attributes:
        config: verl SFT config overrides (a dict, nested or dotted, a YAML file or text);
            they win over the values below.
        batch_size: ``data.train_batch_size`` (default: agl's 32, or fewer when the data is
            smaller).
        micro_batch_size: ``data.micro_batch_size_per_gpu``.
        epochs: ``trainer.total_epochs``.
        max_length: ``data.max_length``; longer samples are dropped and counted, never
            truncated.
        lr: ``optim.lr`` (default: verl's).
        launcher / nproc_per_node / env: How verl's trainer starts (see
            :func:`~agl_verl.sft_trainer.run_verl_sft`).
    """

    config: Mapping[str, Any] | str | os.PathLike[str] | None = None
    batch_size: int | None = None
    micro_batch_size: int | None = None
    epochs: int = 1
    max_length: int = 2048
    lr: float | None = None
    launcher: Launcher = "torchrun"
    nproc_per_node: int | None = None
    env: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        owner = "SFTSettings"
        check_at_least(owner, "batch_size", self.batch_size, 1, integer=True, optional=True)
        check_at_least(
            owner, "micro_batch_size", self.micro_batch_size, 1, integer=True, optional=True
        )
        check_at_least(owner, "epochs", self.epochs, 1, integer=True)
        check_at_least(owner, "max_length", self.max_length, 1, integer=True)
        check_at_least(owner, "lr", self.lr, 0, above=True, optional=True)
        check_at_least(owner, "nproc_per_node", self.nproc_per_node, 1, integer=True, optional=True)
        launchers = get_args(Launcher)
        if self.launcher not in launchers:
            raise InvalidInputError(
                f"SFTSettings.launcher must be one of {', '.join(launchers)}, got "
                f"{self.launcher!r}",
                field="launcher",
                value=self.launcher,
            )
