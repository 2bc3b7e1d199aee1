"""A ``ChatOpenAI`` for an :class:`agl.LLM`, cheap enough to ask for on every attempt.

``ChatOpenAI(base_url=llm.endpoint)`` builds HTTP clients of its own unless it has them for
that base URL already; its cache is keyed by the URL, and a gateway endpoint names the rollout
and attempt, so every attempt builds two more, each parsing the CA bundle: about 60 ms of CPU
on the event loop the runner shares between its agents (issue 48: enough to hold a busy
runner's loop for seconds). :func:`chat_model` hands every chat model the same two HTTP clients
(a synchronous one, and an asynchronous one per event loop: its connections belong to one) and
keeps the models it built by (base URL, key, model, options), so building one per attempt
costs a fraction of a millisecond and the calls of all attempts share pooled connections. A
loop's client is closed when the loop shuts down (``asyncio.run`` does, so a runner's does).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import threading
import weakref
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

import agl

if TYPE_CHECKING:
    import httpx
    from langchain_openai import ChatOpenAI

__all__ = ["chat_model", "close_chat_models"]

MAX_MODELS = 256
"""Chat models kept at most (the least recently asked for go first)."""

_lock = threading.Lock()
_models: collections.OrderedDict[tuple[Any, ...], ChatOpenAI] = collections.OrderedDict()
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
    weakref.WeakKeyDictionary()
)
_closers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncGenerator[None, None]] = (
    weakref.WeakKeyDictionary()
)
_sync_client: httpx.Client | None = None
_loopless_client: httpx.AsyncClient | None = None  # for models asked for outside a loop


def chat_model(llm: agl.LLM, **kwargs: Any) -> ChatOpenAI:
    """Return a ``ChatOpenAI`` that calls ``llm``, sharing HTTP clients with every other one.

    The model gets ``base_url=llm.endpoint``, ``model=llm.model``, ``api_key=llm.api_key``
    (else ``OPENAI_API_KEY``'s, else a placeholder for servers that check none), and
    ``llm.sampling_parameters``: those ``ChatOpenAI`` has a field for (``temperature``,
    ``max_tokens``, ``top_p``, ...) as fields, the rest (vLLM's ``top_k``, say) in
    ``extra_body``. ``kwargs`` go to ``ChatOpenAI`` last and win. Asked again with the same
    values, on the same event loop, it returns the same model.

    Call it inside the agent, once per attempt or per call: the endpoint names the attempt.

    Raises:
        ImportError: langchain-openai is not installed.
    """
    try:
        from langchain_openai import ChatOpenAI
    except ModuleNotFoundError as error:
        raise ImportError(
            "agl_langchain.chat_model needs langchain-openai: pip install langchain-openai"
        ) from error
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None  # a sync agent on a thread: it calls invoke, with the sync client
    options = _options(llm, ChatOpenAI, kwargs)
    key = (id(loop), repr(sorted(options.items(), key=lambda item: item[0])))
    with _lock:
        model = _models.get(key)
        if model is not None and model.http_async_client is _async_client(loop):
            _models.move_to_end(key)
            return model
        options.setdefault("http_client", _client())
        options.setdefault("http_async_client", _async_client(loop))
        model = ChatOpenAI(**options)
        _models[key] = model
        while len(_models) > MAX_MODELS:
            _models.popitem(last=False)
        return model


async def close_chat_models() -> None:
    """Close the running event loop's shared HTTP client and forget the models that used it.

    A loop's client closes anyway when the loop shuts down (``asyncio.run`` shuts its loop
    down); this closes it sooner, for code that keeps its loop but is done with the models.
    """
    loop = asyncio.get_running_loop()
    with _lock:
        client = _async_clients.pop(loop, None)
        closer = _closers.pop(loop, None)
        for key in [key for key, model in _models.items() if model.http_async_client is client]:
            del _models[key]
    if closer is not None:
        await closer.aclose()  # closes the client


def _options(llm: agl.LLM, chat_openai: type[ChatOpenAI], kwargs: dict[str, Any]) -> dict[str, Any]:
    fields = set(chat_openai.model_fields)
    fields |= {f.alias for f in chat_openai.model_fields.values() if f.alias is not None}
    options: dict[str, Any] = {
        "base_url": llm.endpoint,
        "model": llm.model,
        "api_key": llm.api_key or os.environ.get("OPENAI_API_KEY") or "unused",
    }
    extra = {}
    for name, value in llm.sampling_parameters.items():
        if name in fields:
            options[name] = value
        else:
            extra[name] = value
    if extra:
        options["extra_body"] = extra
    options.update(kwargs)
    return options


def _client() -> httpx.Client:
    global _sync_client  # noqa: PLW0603 - made once, on first use
    if _sync_client is None:
        import openai

        _sync_client = openai.DefaultHttpxClient()
    return _sync_client


def _async_client(loop: asyncio.AbstractEventLoop | None) -> httpx.AsyncClient:
    """The loop's shared async client; asked for outside a loop (a sync agent, which calls
    ``invoke``), one kept for that case."""
    global _loopless_client  # noqa: PLW0603 - made once, on first use
    if loop is None:
        if _loopless_client is None:
            import openai

            _loopless_client = openai.DefaultAsyncHttpxClient()
        return _loopless_client
    client = _async_clients.get(loop)
    if client is None:
        import openai

        client = _async_clients[loop] = openai.DefaultAsyncHttpxClient()
        closer = _closers[loop] = _close_at_shutdown(client)
        # Run it to its yield now (it awaits nothing before): the loop tracks it from its first
        # step, and no task is left pending that a close_chat_models could race.
        with contextlib.suppress(StopIteration):
            closer.asend(None).send(None)
    return client


async def _close_at_shutdown(client: httpx.AsyncClient) -> AsyncGenerator[None, None]:
    """Close ``client`` when its loop shuts down.

    An async generator started on a loop is closed by the loop's ``shutdown_asyncgens``, which
    ``asyncio.run`` calls while the loop still runs: the one hook a loop has for its end.
    """
    try:
        yield
    finally:
        await client.aclose()
