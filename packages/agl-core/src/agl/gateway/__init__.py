"""The LLM gateway: an OpenAI-compatible proxy recording each call with its token ids."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agl.gateway._app import Gateway
    from agl.gateway._serve import GatewayServer

__all__ = ["Gateway", "GatewayServer"]

_LAZY = {"Gateway": "agl.gateway._app", "GatewayServer": "agl.gateway._serve"}


def __getattr__(name: str) -> Any:
    # The app needs FastAPI and aiohttp; agl.gateway._paths (which the runner reads) does not.
    if name not in _LAZY:
        raise AttributeError(f"module 'agl.gateway' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
