"""The optimizer model: an OpenAI-compatible endpoint, called with a token budget.

Any server that speaks OpenAI's chat completions API will do: OpenAI's own (a key from the
environment), another hosted API, or a local server (vLLM, llama.cpp, Ollama...) at a
``base_url``. :func:`resolve_endpoint` says where, from the arguments or the environment.

Every call goes through :class:`OptimizerClient`, which

- counts the tokens the server reports using (``usage.total_tokens``) against a
  :class:`TokenBudget`, and makes a call only when the tokens used so far plus a safe upper
  bound of the call's cost fit (see :func:`estimate_tokens`), so a budget is never overrun;
- gives each call a timeout, and turns every failure (a timeout, a refused connection, an HTTP
  error, an empty reply) into an :class:`OptimizerError` whose message says what happened, so
  the search can skip what depended on the call and carry on.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agl import AglError, InvalidInputError

if TYPE_CHECKING:
    import openai

__all__ = [
    "BASE_URL_ENV",
    "DEFAULT_MODEL",
    "MODEL_ENV",
    "BudgetExhaustedError",
    "Completion",
    "Endpoint",
    "OptimizerClient",
    "OptimizerError",
    "TokenBudget",
    "estimate_tokens",
    "extract_prompt",
    "resolve_endpoint",
]

BASE_URL_ENV = ("AGL_APO_BASE_URL", "OPENAI_BASE_URL")
"""Environment variables naming the optimizer's base URL, in the order they are read."""

MODEL_ENV = "AGL_APO_MODEL"
"""Environment variable naming the optimizer model when none is given."""

DEFAULT_MODEL = "gpt-4.1-mini"
"""The model asked for when neither the arguments nor ``AGL_APO_MODEL`` name one."""

_TOKENS_PER_MESSAGE = 32
"""Room for a chat template's markers around each message (generous on purpose)."""


class OptimizerError(AglError):
    """An optimizer call failed: a timeout, an HTTP error, or a reply APO cannot use."""


class BudgetExhaustedError(OptimizerError):
    """The optimizer token budget has no room left for the call."""


@dataclass(frozen=True)
class Endpoint:
    """Where the optimizer model is: ``base_url`` None means OpenAI's API."""

    base_url: str | None
    api_key: str
    source: str
    """What configured it, for messages (``"base_url="``, ``"AGL_APO_BASE_URL"``, ...)."""


def resolve_endpoint(
    base_url: str | None,
    api_key: str | None,
    api_key_env: str,
    environ: Mapping[str, str] | None = None,
) -> Endpoint:
    """Decide which server to call, from the arguments, else the environment.

    The base URL is ``base_url``, else ``$AGL_APO_BASE_URL``, else ``$OPENAI_BASE_URL``, else
    OpenAI's API (which needs a key); the key is ``api_key``, else ``$<api_key_env>``
    (``OPENAI_API_KEY`` by default), else a placeholder (local servers ignore it).

    Raises:
        InvalidInputError: neither a base URL nor a key is configured anywhere.
    """
    env = os.environ if environ is None else environ
    source = "base_url="
    url = base_url
    for name in BASE_URL_ENV:
        if url:
            break
        url, source = env.get(name) or None, name
    key = api_key or env.get(api_key_env) or None
    if not url:
        if key is None:
            raise InvalidInputError(
                "APO has no optimizer model to call: pass "
                "APO(optimizer=OptimizerSettings(base_url=...)) for an "
                "OpenAI-compatible server (a local one included), or set "
                f"{' / '.join(BASE_URL_ENV)}, or set {api_key_env} to use OpenAI's API",
                field="base_url",
            )
        return Endpoint(None, key, api_key_env)
    return Endpoint(url, key or "-", source)


def estimate_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """An upper bound of the tokens ``messages`` make: their UTF-8 bytes plus template room.

    Byte-level BPE tokenizers (those of GPT, Llama, Qwen...) never make more tokens than bytes,
    so with the completion limit added this bounds a call's cost from above.
    """
    size = sum(len(str(message.get("content") or "").encode()) for message in messages)
    return size + _TOKENS_PER_MESSAGE * (len(messages) + 1)


class TokenBudget:
    """Tokens the optimizer may use in all (None: no limit), shared by concurrent calls.

    A call reserves its upper-bound cost before it is sent and settles with what the server
    reported. A call that does not fit waits for calls in flight to settle; it is refused
    (:class:`BudgetExhaustedError`) only when nothing is in flight and it still does not fit.
    """

    def __init__(self, limit: int | None, used: int = 0) -> None:
        self.limit = limit
        self.used = used
        self._reserved = 0
        self._refused = False
        self._settled: asyncio.Condition | None = None

    @property
    def exhausted(self) -> bool:
        """True once a call was refused for lack of room, or nothing is left."""
        return self.limit is not None and (self._refused or self.used >= self.limit)

    async def reserve(self, tokens: int) -> None:
        """Reserve ``tokens``, waiting for calls in flight if needed.

        Raises:
            BudgetExhaustedError: the call cannot fit, even with nothing in flight.
        """
        if self.limit is None:
            return
        if self._settled is None:
            self._settled = asyncio.Condition()
        async with self._settled:
            while self.used + self._reserved + tokens > self.limit:
                if self._reserved == 0:
                    self._refused = True
                    raise BudgetExhaustedError(
                        f"the optimizer token budget ({self.limit}) has {self.limit - self.used} "
                        f"tokens left, and the call may need {tokens}"
                    )
                await self._settled.wait()
            self._reserved += tokens

    async def settle(self, reserved: int, used: int) -> None:
        """Release a reservation and count what the call used."""
        self.used += used
        if self.limit is None or self._settled is None:
            return
        async with self._settled:
            self._reserved -= reserved
            self._settled.notify_all()


@dataclass(frozen=True)
class Completion:
    """One optimizer reply: its text and the tokens it used."""

    text: str
    tokens: int


class OptimizerClient:
    """Calls the optimizer model (an ``openai.AsyncOpenAI`` client underneath).

    Args:
        endpoint: Where (:func:`resolve_endpoint`).
        timeout: Seconds one request may take.
        max_retries: Retries the openai client makes on timeouts, 429s and 5xx errors.
        max_completion_tokens: The longest reply asked for.
        temperature: Sent when not None.
        budget: The token budget calls count against.
        concurrency: Calls in flight at most.
        client: A client of the caller's whose settings to use (base URL, key, organization,
            project, headers, timeout, retries). The calls go through a client of this object's
            own, opened and closed in the run's event loop: the caller's client may have been
            made outside it, and stays the caller's to close.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        timeout: float,
        max_retries: int,
        max_completion_tokens: int,
        temperature: float | None,
        budget: TokenBudget,
        concurrency: int,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        import openai

        self.endpoint = endpoint
        self.timeout = timeout
        self.max_completion_tokens = max_completion_tokens
        self.temperature = temperature
        self.budget = budget
        self.calls = 0
        """Requests sent (failed ones included)."""
        self._limit = asyncio.Semaphore(concurrency)
        if client is not None:
            self._client = openai.AsyncOpenAI(
                base_url=client.base_url,
                api_key=client.api_key,
                organization=client.organization,
                project=client.project,
                # the headers the caller gave (default_headers adds the client's own)
                default_headers=getattr(client, "_custom_headers", None) or None,
                timeout=client.timeout,
                max_retries=client.max_retries,
            )
        else:
            self._client = openai.AsyncOpenAI(
                base_url=endpoint.base_url,
                api_key=endpoint.api_key,
                timeout=timeout,
                max_retries=max_retries,
            )

    async def complete(self, model: str, messages: list[dict[str, str]]) -> Completion:
        """Ask ``model``; return the reply's text and the tokens used.

        Raises:
            BudgetExhaustedError: no room left in the token budget.
            OptimizerError: the call failed or the reply has no text (the message says which).
        """
        import openai

        ceiling = estimate_tokens(messages) + self.max_completion_tokens
        await self.budget.reserve(ceiling)
        used = 0
        try:
            async with self._limit:
                self.calls += 1
                options: dict[str, Any] = {"max_completion_tokens": self.max_completion_tokens}
                if self.temperature is not None:
                    options["temperature"] = self.temperature
                try:
                    response = await self._client.chat.completions.create(
                        model=model,
                        messages=messages,  # type: ignore[arg-type]
                        **options,
                    )
                except openai.APITimeoutError as exc:
                    raise OptimizerError(
                        f"the optimizer model did not answer within {self.timeout:g} s"
                    ) from exc
                except openai.APIStatusError as exc:
                    raise OptimizerError(
                        f"the optimizer model answered HTTP {exc.status_code}: "
                        f"{_status_message(exc)}"
                    ) from exc
                except openai.APIConnectionError as exc:
                    where = self.endpoint.base_url or "OpenAI's API"
                    raise OptimizerError(f"cannot reach the optimizer at {where}: {exc}") from exc
                except openai.OpenAIError as exc:
                    raise OptimizerError(f"the optimizer call failed: {_short(str(exc))}") from exc
            usage = getattr(response, "usage", None)
            reported = getattr(usage, "total_tokens", None)
            used = reported if isinstance(reported, int) else ceiling
            choices = getattr(response, "choices", None) or []
            message = getattr(choices[0], "message", None) if choices else None
            text = getattr(message, "content", None)
            if not isinstance(text, str) or not text.strip():
                raise OptimizerError("the optimizer model sent an empty reply")
            return Completion(text, used)
        finally:
            await self.budget.settle(ceiling, used)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.close()


_PROMPT_BLOCK = re.compile(r"<prompt>(.*?)</prompt>", re.DOTALL | re.IGNORECASE)


def extract_prompt(reply: str) -> str:
    """The template in a rewrite or merge reply: its last ``<prompt>...</prompt>`` block.

    Raises:
        OptimizerError: the reply has no such block, or it is empty.
    """
    blocks = _PROMPT_BLOCK.findall(reply)
    if not blocks:
        raise OptimizerError(f"no <prompt>...</prompt> block in the reply: {_short(reply)!r}")
    text: str = blocks[-1].strip()
    if not text:
        raise OptimizerError("the reply's <prompt> block is empty")
    return text


def _status_message(exc: Any) -> str:
    """The message of an HTTP error: the body's ``error.message`` when the server sent one."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else None
        if isinstance(message, str) and message:
            return _short(message)
    return _short(str(getattr(exc, "message", exc)))


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
