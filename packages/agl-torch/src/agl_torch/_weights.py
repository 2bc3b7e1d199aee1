"""New weights for a served model: read from a model folder, and checked against the model.

:data:`WeightsLike` and :func:`load_weights` are public as :mod:`agl_torch.engine`'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from agl import InvalidInputError

WeightsLike = Mapping[str, torch.Tensor] | str | os.PathLike[str]
"""New weights: a state dict, or a Hugging Face model folder saved with ``save_pretrained``."""


def load_weights(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Read the state dict of a model folder saved with ``save_pretrained`` (or one file).

    Raises:
        InvalidInputError: ``path`` holds no ``*.safetensors`` file.
    """
    from safetensors.torch import load_file

    where = Path(path)
    files = [where] if where.is_file() else sorted(where.glob("*.safetensors"))
    if not files or any(f.suffix != ".safetensors" for f in files):
        raise InvalidInputError(
            "weights must be a model folder with *.safetensors files, or such a file "
            f"(got {str(path)!r})",
            field="weights",
            value=str(path),
        )
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(file))
    return state


def check_fits(model: Any, state: Mapping[str, torch.Tensor]) -> None:
    """Check that ``state`` can replace all of ``model``'s weights (tied ones may be left out).

    Raises:
        InvalidInputError: Names the missing, unexpected and misshapen tensors.
    """
    own = model.state_dict(keep_vars=True)
    unexpected = sorted(set(state) - set(own))
    names_of: dict[int, list[str]] = {}
    for name, tensor in own.items():  # tied weights: one tensor under several names
        names_of.setdefault(id(tensor), []).append(name)
    missing = sorted(names[0] for names in names_of.values() if not any(n in state for n in names))
    misshapen = sorted(
        n for n in set(state) & set(own) if tuple(state[n].shape) != tuple(own[n].shape)
    )
    if unexpected or missing or misshapen:
        raise InvalidInputError(
            "the weights do not fit the model: "
            f"missing {_few(missing)}, unexpected {_few(unexpected)}, "
            f"wrong shape {_few(misshapen)}",
            field="weights",
        )


def _few(names: Sequence[str]) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:5])
    return f"{shown} (+{len(names) - 5} more)" if len(names) > 5 else shown
