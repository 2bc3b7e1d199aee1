"""Replace one attribute of a framework's class or module while instrumented, reversibly.

What instrumentation cannot do through a framework's public hooks it does by wrapping one
method, and that wrapping has the same four steps everywhere: find the attribute on the owner
itself (not inherited, so undoing puts back exactly what was there), warn and skip if this
release of the framework has no such attribute, install the wrapper, and push the undoing onto
the instrumentor's :class:`~contextlib.ExitStack`. :func:`patch` is those steps::

    def apply(self, undo: contextlib.ExitStack) -> None:
        from shout import Client

        patch(undo, Client, "_send", lambda send: noting_ids(send),
              missing="shout's Client has no _send: calls are recorded without their id")
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["patch"]

logger = logging.getLogger(__name__)


def patch(
    undo: contextlib.ExitStack,
    owner: object,
    name: str,
    wrap: Callable[[Any], Any],
    *,
    missing: str | None = None,
) -> bool:
    """Set ``owner.name`` to ``wrap(original)`` until ``undo`` closes.

    ``original`` is the value defined on ``owner`` itself (``vars(owner)[name]``): for a
    class, the raw ``staticmethod`` or ``classmethod`` object where it is one, and never a
    value inherited from a base class.

    Args:
        undo: Where the restoring of the original is pushed.
        owner: The class or module.
        name: The attribute.
        wrap: Builds the replacement from the original.
        missing: Logged as a warning when ``owner`` has no ``name`` of its own (None: skip
            quietly, for an attribute only some releases have).

    Returns:
        Whether the attribute was replaced.
    """
    original = vars(owner).get(name)
    if original is None:
        if missing is not None:
            logger.warning("%s", missing)
        return False
    setattr(owner, name, wrap(original))
    undo.callback(setattr, owner, name, original)
    return True
