"""agl-apo: automatic prompt optimization for agl, alone or beside RL in one run.

``import agl_apo`` stays light: the names below load their module on first use.

- :class:`APO` (``"apo"``): the algorithm (textual gradients, beam search, Pareto front,
  merges, budgets, resume).
- :class:`OptimizerSettings`, :class:`SearchSettings`, :class:`Budgets`: its settings (beside
  :class:`agl.LoopSettings`).
- :class:`APOState`: the search as the store keeps it, published beside the prompts.
- :class:`CostEstimate`, :func:`estimate_cost`: the dry run (``APO(...).estimate(...)``).
- :class:`MetaPrompts`: the prompts APO sends the optimizer model.
- :class:`OptimizerError`: an optimizer call that failed (APO skips what depended on it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agl_apo.algorithm import APO
    from agl_apo.estimate import CostEstimate, estimate_cost
    from agl_apo.meta_prompts import MetaPrompts
    from agl_apo.optimizer import OptimizerError
    from agl_apo.settings import Budgets, OptimizerSettings, SearchSettings
    from agl_apo.state import APOState

__all__ = [
    "APO",
    "APOState",
    "Budgets",
    "CostEstimate",
    "MetaPrompts",
    "OptimizerError",
    "OptimizerSettings",
    "SearchSettings",
    "estimate_cost",
]

_HOMES = {
    "APO": "agl_apo.algorithm",
    "APOState": "agl_apo.state",
    "Budgets": "agl_apo.settings",
    "OptimizerSettings": "agl_apo.settings",
    "SearchSettings": "agl_apo.settings",
    "CostEstimate": "agl_apo.estimate",
    "MetaPrompts": "agl_apo.meta_prompts",
    "OptimizerError": "agl_apo.optimizer",
    "estimate_cost": "agl_apo.estimate",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agl_apo' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
