"""The LLM gateway: an OpenAI-compatible proxy recording each call with its token ids."""

from agl.gateway.app import Gateway
from agl.gateway.serve import GatewayServer

__all__ = ["Gateway", "GatewayServer"]
