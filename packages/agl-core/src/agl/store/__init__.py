"""Stores: where rollouts, attempts, spans and resources live.

Open one by URL with :func:`open_store`; every backend implements :class:`Store`.
"""

from agl.store.base import Store, StoreStatistics
from agl.store.open import open_store

__all__ = ["Store", "StoreStatistics", "open_store"]
