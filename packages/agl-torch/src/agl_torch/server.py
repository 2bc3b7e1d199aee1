"""An OpenAI-compatible policy server for a transformers causal LM, in vLLM's wire format.

:class:`PolicyServer` serves a model from a :class:`~agl_torch.engine.GenerationEngine` over
HTTP, so that agents (through agl's gateway or not) talk to the policy being trained exactly as
they would talk to ``vllm serve``::

    with PolicyServer("models/tiny", model_name="policy") as server:
        client = openai.OpenAI(base_url=server.url, api_key="-")
        ...
        server.update_weights(learner.model.state_dict())   # the next requests use them

or from a shell: ``python -m agl_torch.server --model models/tiny --port 8000``.

Routes: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (streaming or not),
``GET /v1/models`` (with vLLM's ``max_model_len``), ``GET /health``, and for training loops
``GET /agl/weights`` (``{"version": n}``) and ``POST /agl/weights`` with ``{"path": folder}``
(load a ``save_pretrained`` folder; answers with the new version once it is in use).

**vLLM's format.** With ``"return_token_ids": true`` a chat body carries top-level
``prompt_token_ids`` and per-choice ``token_ids``; a chat stream carries ``prompt_token_ids`` on
its first chunk and each token's id in its chunk's ``token_ids``; completions carry both per
choice. Chat logprobs (``logprobs: true``, ``top_logprobs: k``) come as ``{"content": [{token,
logprob, bytes, top_logprobs}]}``, completions logprobs (``logprobs: k``) as ``{tokens,
token_logprobs, top_logprobs, text_offset}``. Logprobs are the raw model distribution's (before
temperature and top-p). Errors are OpenAI error bodies (``{"error": {"message", "type", "param",
"code"}}``), 400 for any invalid request.

**Text is the decoding of the tokens.** A choice's text is exactly ``tokenizer.decode(token_ids,
skip_special_tokens=True)`` (so a final EOS is in ``token_ids`` but not in the text); a stream's
deltas add up to it. A stop string therefore stays in the text, unlike vLLM, which cuts it off.

**Tool calls.** When a chat request has ``tools`` (and ``tool_choice`` is not ``"none"``),
hermes-style calls in the text (:mod:`agl_torch.tool_parser`) become ``message.tool_calls``
with the arguments exactly as generated, ``content`` is the text before the first call, and
``finish_reason`` is ``"tool_calls"``. A stream sends content deltas until ``<tool_call>``
appears, then holds the rest back and sends the calls with the last token. ``tool_choice`` is not
enforced (no guided decoding).

**Weight versions.** Every response says which weights produced it: ``system_fingerprint`` is
``"agl-torch-v{n}"`` (on every stream chunk too) and the ``x-agl-weight-version`` header is
``n`` (a stream's headers are sent once its first token exists, so they are exact too).

Not supported: ``n`` other than 1, ``echo``, several prompts in one completions request.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agl.errors import AglError, InvalidInputError
from agl.server_thread import ServerThread
from agl_torch.engine import (
    Completion,
    GenerationEngine,
    SamplingParams,
    Token,
    WeightsLike,
)
from agl_torch.tool_parser import TOOL_CALL_START, ToolCall, parse_tool_calls

if TYPE_CHECKING:
    import torch

__all__ = ["VERSION_HEADER", "PolicyServer", "create_app", "fingerprint", "main"]

VERSION_HEADER = "x-agl-weight-version"
"""The response header holding the weight version that produced the response."""
MAX_TOP_LOGPROBS = 20
"""The most top logprobs a token may ask for (vLLM's default ``max_logprobs``)."""

JSON = dict[str, Any]


def fingerprint(version: int) -> str:
    """The ``system_fingerprint`` of responses produced by weight version ``version``."""
    return f"agl-torch-v{version}"


class PolicyServer(ServerThread):
    """A causal LM served over HTTP on a background thread; ``port=0`` picks a free port.

    Args:
        model: A Hugging Face model folder (loaded with ``AutoModelForCausalLM`` and
            ``AutoTokenizer``), or a loaded transformers model (then pass ``tokenizer``).
        tokenizer: The tokenizer of a loaded ``model``; it must have a chat template.
        model_name: The model id ``/v1/models`` lists.
        host: The address to bind.
        port: The port to bind; 0 for a free one.
        device: Where to run the model; the model's device (a loaded one) or the CPU.
        max_batch_size: The most requests generated together.
        max_model_len: The longest prompt + generation; the model's maximum by default.
        log_level: uvicorn's log level.
    """

    thread_name = "agl-policy-server"

    def __init__(
        self,
        model: str | os.PathLike[str] | Any,
        *,
        tokenizer: Any = None,
        model_name: str = "policy",
        host: str = "127.0.0.1",
        port: int = 0,
        device: str | torch.device | None = None,
        max_batch_size: int = 64,
        max_model_len: int | None = None,
        log_level: str = "warning",
    ) -> None:
        super().__init__(host=host, port=port, log_level=log_level)
        if isinstance(model, str | os.PathLike):
            model, tokenizer = _load(Path(model), tokenizer)
        elif tokenizer is None:
            raise InvalidInputError("a loaded model needs its tokenizer", field="tokenizer")
        self.model_name = model_name
        self.engine = GenerationEngine(
            model,
            tokenizer,
            device=device,
            max_batch_size=max_batch_size,
            max_model_len=max_model_len,
        )
        """The engine generating for every request."""

    @property
    def url(self) -> str:
        """The OpenAI base URL, ending in ``/v1`` (empty until started)."""
        return f"{self.base_url}/v1" if self.base_url else ""

    def update_weights(self, weights: WeightsLike) -> int:
        """Swap in new weights between batches; see :meth:`GenerationEngine.update_weights`."""
        return self.engine.update_weights(weights)

    def start(self, timeout: float = 30.0) -> str:
        """Start the engine, then serve; return the base URL (without ``/v1``)."""
        self.engine.start()
        return super().start(timeout)

    def stop(self) -> None:
        """Stop serving, then stop the engine."""
        super().stop()
        self.engine.stop()

    def create_app(self) -> FastAPI:
        return create_app(self.engine, self.model_name)


def _load(path: Path, tokenizer: Any) -> tuple[Any, Any]:
    """Load a model folder (and its tokenizer unless given) without transformers' chatter."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    if not (path / "config.json").is_file():
        raise InvalidInputError(
            f"{path} is not a Hugging Face model folder (no config.json)",
            field="model",
            value=str(path),
        )
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(path)
        return model, tokenizer or AutoTokenizer.from_pretrained(path)
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


# --- the app ----------------------------------------------------------------------------------


def create_app(engine: GenerationEngine, model_name: str = "policy") -> FastAPI:
    """The FastAPI app serving ``engine`` (which must be started to answer generations)."""
    api = _Api(engine, model_name)
    app = FastAPI(title="agl-torch policy server", version="1")

    @app.exception_handler(InvalidInputError)
    async def invalid(_: Request, exc: InvalidInputError) -> JSONResponse:
        return _error(400, exc.message, param=exc.field)

    @app.exception_handler(AglError)
    async def unavailable(_: Request, exc: AglError) -> JSONResponse:
        return _error(503, exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def crash(_: Request, exc: Exception) -> JSONResponse:
        return _error(500, f"the policy server failed: {type(exc).__name__}: {exc}")

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> JSON:
        card = {"id": model_name, "object": "model", "created": int(time.time())}
        card |= {"owned_by": "agl", "root": model_name, "parent": None}
        return {"object": "list", "data": [{**card, "max_model_len": engine.max_model_len}]}

    @app.get("/agl/weights")
    async def weights() -> JSON:
        return {"version": engine.version}

    @app.post("/agl/weights")
    async def load_weights(request: Request) -> JSON:
        path = (await _body(request)).get("path")
        if not isinstance(path, str) or not path:
            raise InvalidInputError(
                "'path' must be the path of a model folder", field="path", value=path
            )
        return {"version": await engine.update_weights_async(path)}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await api.chat(await _body(request))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await api.completions(await _body(request))

    return app


class _Api:
    """The two generation routes: request checks, prompts, and vLLM-shaped answers."""

    def __init__(self, engine: GenerationEngine, model_name: str) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.model_name = model_name
        self._token_texts: dict[int, str] = {}

    async def chat(self, body: JSON) -> Response:
        prompt = self._chat_prompt(body)
        top = _chat_top_logprobs(body)
        tools = bool(body.get("tools")) and body.get("tool_choice") != "none"
        params = _sampling(body, ("max_completion_tokens", "max_tokens"), None, top or 0)
        reply = _Reply(self, body, prompt, top, chat=True, tools=tools)
        if body.get("stream"):
            return await reply.stream(self.engine.stream(prompt, params))
        return reply.chat(await self.engine.generate(prompt, params))

    async def completions(self, body: JSON) -> Response:
        if body.get("echo"):
            raise InvalidInputError("'echo' is not supported", field="echo", value=True)
        prompt = self._prompt_ids(body.get("prompt"))
        top = _optional_int(body, "logprobs", 0, MAX_TOP_LOGPROBS)
        params = _sampling(body, ("max_tokens",), 16, top or 0)
        reply = _Reply(self, body, prompt, top, chat=False, tools=False)
        if body.get("stream"):
            return await reply.stream(self.engine.stream(prompt, params))
        return reply.completion(await self.engine.generate(prompt, params))

    def _chat_prompt(self, body: JSON) -> list[int]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InvalidInputError(
                "'messages' must be a non-empty list of messages", field="messages"
            )
        if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise InvalidInputError(
                "every message must be an object with a 'role'", field="messages"
            )
        tools = body.get("tools")
        if tools is not None and not (
            isinstance(tools, list) and all(isinstance(t, dict) for t in tools)
        ):
            raise InvalidInputError("'tools' must be a list of tool objects", field="tools")
        try:
            text = self.tokenizer.apply_chat_template(
                [{**m, "content": _content_text(m.get("content"))} for m in messages],
                tools=tools or None,
                add_generation_prompt=True,
                tokenize=False,
            )
        except Exception as exc:  # a template error: the messages do not fit it
            raise InvalidInputError(
                f"the chat template cannot render these messages: {exc}", field="messages"
            ) from exc
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _prompt_ids(self, prompt: Any) -> list[int]:
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        if isinstance(prompt, str):
            return list(self.tokenizer.encode(prompt))
        if isinstance(prompt, list) and all(_is_int(t) for t in prompt):
            return prompt
        raise InvalidInputError(
            "'prompt' must be a string or a list of token ids (one prompt per request)",
            field="prompt",
        )

    def decode(self, token_ids: list[int]) -> str:
        return str(self.tokenizer.decode(token_ids, skip_special_tokens=True))

    def token_text(self, token_id: int) -> str:
        """One token as logprobs show it (special tokens included)."""
        if token_id not in self._token_texts:
            self._token_texts[token_id] = str(self.tokenizer.decode([token_id]))
        return self._token_texts[token_id]


class _Reply:
    """One response being built: the whole body, or the chunks of a stream."""

    def __init__(
        self,
        api: _Api,
        body: JSON,
        prompt: list[int],
        top: int | None,
        *,
        chat: bool,
        tools: bool,
    ) -> None:
        self.api = api
        self.is_chat = chat
        self.prompt = prompt
        self.top = top
        self.tools = tools
        self.ids = bool(body.get("return_token_ids"))
        self.usage = _include_usage(body)
        model = body.get("model")
        self.head: JSON = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": model if isinstance(model, str) and model else api.model_name,
        }

    # --- whole bodies -----------------------------------------------------------------------

    def chat(self, done: Completion) -> Response:
        text = self.api.decode(done.token_ids)
        content, calls = parse_tool_calls(text) if self.tools else (text, [])
        message: JSON = {"role": "assistant", "content": content if calls else text}
        message["tool_calls"] = _tool_calls(calls)
        choice = {
            "index": 0,
            "message": message,
            "logprobs": self._chat_logprobs(done.token_ids, done.logprobs, done.top_logprobs),
            "finish_reason": "tool_calls" if calls else done.finish_reason,
            "stop_reason": done.stop_reason,
            "token_ids": done.token_ids if self.ids else None,
        }
        body = self._body(done, choice)
        body["prompt_token_ids"] = self._prompt_ids()
        return JSONResponse(body, headers=_version_header(done.weight_version))

    def completion(self, done: Completion) -> Response:
        choice = {
            "index": 0,
            "text": self.api.decode(done.token_ids),
            "logprobs": self._completion_logprobs(done.token_ids, done.logprobs, done.top_logprobs),
            "finish_reason": done.finish_reason,
            "stop_reason": done.stop_reason,
            "prompt_token_ids": self._prompt_ids(),
            "token_ids": done.token_ids if self.ids else None,
        }
        return JSONResponse(self._body(done, choice), headers=_version_header(done.weight_version))

    def _body(self, done: Completion, choice: JSON) -> JSON:
        return {
            **self.head,
            "choices": [choice],
            "usage": _usage(len(self.prompt), len(done.token_ids)),
            "system_fingerprint": fingerprint(done.weight_version),
        }

    # --- streams ---------------------------------------------------------------------------

    async def stream(self, events: AsyncGenerator[Token | Completion, None]) -> Response:
        """Wait for the first token (request errors surface here, as 400s), then stream."""
        try:
            first = await anext(events)
        except BaseException:
            await events.aclose()
            raise
        assert isinstance(first, Token)  # every generation has a token before its end
        return StreamingResponse(
            self._events(first, events),
            media_type="text/event-stream",
            headers=_version_header(first.weight_version),
        )

    async def _events(
        self, first: Token, events: AsyncGenerator[Token | Completion, None]
    ) -> AsyncIterator[str]:
        """The SSE events: one chunk per token, each sent once the next event is in.

        Sending one event late lets the last token's chunk carry the finish reason and, for a
        chat with tools, the tool calls (which only the whole text shows).
        """
        head = {**self.head, "system_fingerprint": fingerprint(first.weight_version)}
        if self.is_chat:
            head["object"] = "chat.completion.chunk"
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
            role |= {"logprobs": None, "finish_reason": None}
            yield _sse({**head, "choices": [role], "prompt_token_ids": self._prompt_ids()})
        text = _StreamText(self.api, self.tools)
        pending, done = first, None
        try:
            async for event in events:
                if isinstance(event, Token):
                    yield _sse({**head, "choices": [self._chunk(pending, text.add(pending.id))]})
                    pending = event
                else:
                    done = event
        except Exception as exc:  # the batch failed: tell the client, as vLLM does
            yield _sse({"error": _error_body(500, f"generation failed: {exc}")})
            yield "data: [DONE]\n\n"
            return
        finally:
            await events.aclose()
        assert done is not None
        last = self._chunk(pending, text.finish(pending.id))
        last["finish_reason"] = "tool_calls" if text.calls else done.finish_reason
        last["stop_reason"] = done.stop_reason
        yield _sse({**head, "choices": [last]})
        if self.usage:
            usage = _usage(len(self.prompt), len(done.token_ids))
            yield _sse({**head, "choices": [], "usage": usage})
        yield "data: [DONE]\n\n"

    def _chunk(self, token: Token, piece: _Piece) -> JSON:
        """The choice of one token's chunk; ``piece`` is what the token adds to the text."""
        ids, lps, tops = [token.id], [token.logprob], [token.top_logprobs]
        if self.is_chat:
            delta: JSON = {"content": piece.text} if piece.text else {}
            if piece.calls:
                delta["tool_calls"] = [
                    {"index": i, **call} for i, call in enumerate(_tool_calls(piece.calls))
                ]
            choice = {"index": 0, "delta": delta, "logprobs": self._chat_logprobs(ids, lps, tops)}
        else:
            logprobs = self._completion_logprobs(ids, lps, tops, piece.offset)
            choice = {"index": 0, "text": piece.text, "logprobs": logprobs}
            choice["prompt_token_ids"] = self._prompt_ids() if piece.position == 0 else None
        return choice | {"finish_reason": None, "token_ids": ids if self.ids else None}

    def _prompt_ids(self) -> list[int] | None:
        return self.prompt if self.ids else None

    # --- logprobs ---------------------------------------------------------------------------

    def _chat_logprobs(
        self, ids: list[int], lps: list[float], tops: list[list[tuple[int, float]]]
    ) -> JSON | None:
        if self.top is None:
            return None
        return {
            "content": [
                {
                    **self._entry(token, logprob),
                    "top_logprobs": [self._entry(t, lp) for t, lp in top],
                }
                for token, logprob, top in zip(ids, lps, tops, strict=True)
            ]
        }

    def _entry(self, token_id: int, logprob: float) -> JSON:
        text = self.api.token_text(token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    def _completion_logprobs(
        self,
        ids: list[int],
        lps: list[float],
        tops: list[list[tuple[int, float]]],
        offset: int = 0,
    ) -> JSON | None:
        if self.top is None:
            return None
        tokens = [self.api.token_text(t) for t in ids]
        offsets = []
        for token in tokens:
            offsets.append(offset)
            offset += len(token)
        top_dicts = [
            {self.api.token_text(t): lp for t, lp in [*top, (token, logprob)]}
            for token, logprob, top in zip(ids, lps, tops, strict=True)
        ]
        return {
            "tokens": tokens,
            "token_logprobs": lps,
            "top_logprobs": top_dicts,
            "text_offset": offsets,
        }


class _Piece(NamedTuple):
    """What one streamed token adds: text, and (with the last token) the tool calls."""

    text: str
    position: int
    offset: int
    calls: list[ToolCall]


class _StreamText:
    """Turns a stream's tokens into text pieces that add up to the decoding of all of them.

    A piece never ends in half a character (the replacement character a partial UTF-8 sequence
    decodes to waits for the rest), and with tools nothing from ``<tool_call>`` on, nor what
    could be its beginning, is sent as text: the calls go out with the last token.
    """

    def __init__(self, api: _Api, tools: bool) -> None:
        self.api = api
        self.tools = tools
        self.ids: list[int] = []
        self.sent = ""
        self.offset = 0  # the text_offset of the next token in completions logprobs
        self.calls: list[ToolCall] = []

    def add(self, token_id: int) -> _Piece:
        """The piece of a token that is not the last."""
        self.ids.append(token_id)
        visible = self.api.decode(self.ids).rstrip("\ufffd")
        return self._piece(visible[: _tool_start(visible)] if self.tools else visible)

    def finish(self, token_id: int) -> _Piece:
        """The piece of the last token: the rest of the text, and the tool calls if any."""
        self.ids.append(token_id)
        text = self.api.decode(self.ids)
        if self.tools:
            content, self.calls = parse_tool_calls(text)
            if self.calls:
                return self._piece(content or "")
        return self._piece(text)

    def _piece(self, visible: str) -> _Piece:
        new = visible[len(self.sent) :] if visible.startswith(self.sent) else ""
        self.sent += new
        offset = self.offset
        self.offset += len(self.api.token_text(self.ids[-1]))
        return _Piece(new, len(self.ids) - 1, offset, self.calls)


def _tool_start(text: str) -> int:
    """Where a tool call starts or may be starting in ``text`` (its length if nowhere)."""
    at = text.find(TOOL_CALL_START)
    if at >= 0:
        return at
    for size in range(min(len(TOOL_CALL_START) - 1, len(text)), 0, -1):
        if TOOL_CALL_START.startswith(text[-size:]):
            return len(text) - size
    return len(text)


# --- helpers ----------------------------------------------------------------------------------


async def _body(request: Request) -> JSON:
    try:
        body = json.loads(await request.body())
    except ValueError as exc:
        raise InvalidInputError(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidInputError("the request body must be a JSON object")
    return body


def _sampling(
    body: JSON, max_keys: tuple[str, ...], default_max: int | None, top: int
) -> SamplingParams:
    """The sampling parameters of a request, checked (``n`` too: only 1 is served)."""
    n = body.get("n")
    if n is not None and n != 1:
        raise InvalidInputError(
            f"'n' must be 1: this server generates one choice per request (got {n!r})",
            field="n",
            value=n,
        )
    max_tokens = next((body[k] for k in max_keys if body.get(k) is not None), default_max)
    if max_tokens is not None and (not _is_int(max_tokens) or max_tokens < 1):
        raise InvalidInputError(
            f"{max_keys[0]!r} must be a positive integer (got {max_tokens!r})", field=max_keys[0]
        )
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list):
        raise InvalidInputError(f"'stop' must be a string or a list of strings (got {stop!r})")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise InvalidInputError(f"'seed' must be an integer (got {seed!r})", field="seed")
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0),
        top_p=_number(body, "top_p", 1.0),
        stop=stop,
        seed=seed,
        top_logprobs=top,
    )


def _number(body: JSON, key: str, default: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"'{key}' must be a number (got {value!r})", field=key)
    return float(value)


def _optional_int(body: JSON, key: str, low: int, high: int) -> int | None:
    value = body.get(key)
    if value is not None and (not _is_int(value) or not low <= value <= high):
        raise InvalidInputError(
            f"'{key}' must be an integer from {low} to {high} (got {value!r})", field=key
        )
    return value


def _chat_top_logprobs(body: JSON) -> int | None:
    """How many top logprobs a chat request wants per token; ``None`` for no logprobs."""
    top = _optional_int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if not body.get("logprobs"):
        if top:
            raise InvalidInputError(
                "'top_logprobs' needs 'logprobs': true", field="top_logprobs", value=top
            )
        return None
    return top or 0


def _include_usage(body: JSON) -> bool:
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise InvalidInputError("'stream_options' must be an object", field="stream_options")
    return bool((options or {}).get("include_usage")) and bool(body.get("stream"))


def _content_text(content: Any) -> Any:
    """A message's content for a text-only template: text parts joined, anything else as is."""
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    return content


def _tool_calls(calls: list[ToolCall]) -> list[JSON]:
    return [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for call in calls
    ]


def _usage(prompt_tokens: int, completion_tokens: int) -> JSON:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _version_header(version: int) -> dict[str, str]:
    return {VERSION_HEADER: str(version)}


def _error(status: int, message: str, *, param: str | None = None) -> JSONResponse:
    return JSONResponse(_error_body(status, message, param), status_code=status)


def _error_body(status: int, message: str, param: str | None = None) -> JSON:
    """OpenAI's error body, with the ``type`` names vLLM and the OpenAI SDK use."""
    kinds = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}
    kind = kinds.get(status, "InternalServerError" if status == 500 else "APIError")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def _sse(data: Mapping[str, Any]) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --- command line -----------------------------------------------------------------------------


def main(
    model: Annotated[Path, typer.Option("--model", help="A Hugging Face model folder.")],
    model_name: Annotated[
        str, typer.Option("--model-name", help="The id /v1/models lists.")
    ] = "policy",
    host: Annotated[str, typer.Option("--host", help="The address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="The port to bind (0: a free one).")] = 8000,
    device: Annotated[str | None, typer.Option("--device", help="cpu, cuda, cuda:1...")] = None,
    max_batch_size: Annotated[
        int, typer.Option("--max-batch-size", help="The most requests generated together.")
    ] = 64,
) -> None:
    """Serve a model folder until interrupted; print the OpenAI base URL once it is up."""
    try:
        server = PolicyServer(
            model,
            model_name=model_name,
            host=host,
            port=port,
            device=device,
            max_batch_size=max_batch_size,
            log_level="info",
        )
    except InvalidInputError as exc:
        raise typer.BadParameter(
            exc.message, param_hint=f"--{(exc.field or 'model').replace('_', '-')}"
        ) from None
    server.start()
    typer.echo(server.url)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    typer.run(main)
