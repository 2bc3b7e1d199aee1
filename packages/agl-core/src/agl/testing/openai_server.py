"""A scripted, OpenAI-compatible server that speaks vLLM's wire protocol, for tests.

It stands in for ``vllm serve`` in the default test suite: real HTTP, real server-sent events,
real token ids, no GPU. What the "model" says comes from a :data:`Script`, a function from the
request's JSON body to a :class:`Reply` (text, tool calls, an error, delays)::

    from agl.testing.openai_server import OpenAIServer, Reply, tool_reply

    def script(request: dict) -> Reply | str:
        return tool_reply("get_weather", {"city": "Paris"}) if request.get("tools") else "hi"

    with OpenAIServer(script, max_model_len=2048) as server:
        client = openai.OpenAI(base_url=server.url, api_key="test")
        ...
        assert server.requests[0].body["model"] == "m"

Routes: ``GET /v1/models``, ``GET /health``, ``POST /v1/chat/completions``,
``POST /v1/completions``, ``POST /v1/responses`` (the OpenAI Responses API) and
``POST /v1/messages`` (the Anthropic Messages API), each streaming (``"stream": true``) or not.
The last two are served through the chat route by :func:`agl.openai_wire.serve_wire`, as the
gateway and agl-torch's policy server serve them: the script sees the chat request they become.
``POST /tokenize`` (vLLM's, beside ``/v1``) counts a chat's (``messages``) or a prompt's tokens.
Every request, including unknown routes, is recorded in :attr:`OpenAIServer.requests`.

**Tokenizer.** Byte level: token id = UTF-8 byte + 3; ids 0, 1, 2 are BOS, EOS and PAD
(:data:`VOCAB_SIZE` is 259). EOS is the template's end-of-turn marker ``<|im_end|>`` (one
token, as in ChatML models), so a multi-turn prompt extends the earlier prompt + response
token for token. ``decode(encode(text)) == text`` for any text without ``<|im_end|>``
(decoding skips special tokens). No BOS is added.

**Chat template** (``tools``, when given, as a first system message
``# Tools\\n<json.dumps(tools, sort_keys)>``)::

    <|im_start|>{role}\\n{content}<|im_end|>\\n   (per message; text parts of list contents joined)
    <|im_start|>assistant\\n                      (the generation prompt)

Assistant tool calls in the history, and the tool calls the model makes, are written Hermes
style: ``<tool_call>\\n{"name": <name>, "arguments": <arguments json>}\\n</tool_call>``.

**Generation.** The reply text (or the tool-call text) is tokenized; a finished reply ends with
EOS, counted in ``usage.completion_tokens`` and in ``token_ids`` but not in the text. At
``max_tokens``/``max_completion_tokens``/``max_output_tokens`` (completions: 16 by default, as
vLLM; chat: what ``max_model_len`` leaves) it is cut, with ``finish_reason="length"`` and no EOS;
cut tool calls come back as text. Streams send one token per chunk, each with its text delta.
``n`` gives several choices. Logprobs are deterministic (a hash of position and token), always
<= 0; the sampled token is the most likely one and the alternatives are printable ASCII.

**vLLM's format**: requests are read, and bodies, chunks and errors built, by
:mod:`agl.openai_wire`, whose docstrings give the shapes and their vLLM sources (vLLM >=
0.10.2). A prompt of
``max_model_len`` tokens or more, or ``max_tokens`` beyond what is left, gets vLLM's 400
("This model's maximum context length is N tokens. However, your request has M input tokens.
...").
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agl._serving._server_thread import ServerThread
from agl.openai_wire import (
    WEIGHT_VERSION_HEADER,
    WIRES,
    WireError,
    WireRequest,
    check_context,
    error_body,
    head,
    model_list,
    new_id,
    read_json,
    read_request,
    serve_wire,
)
from agl.openai_wire import WireJSONResponse as JSONResponse
from agl.testing import _openai_bodies as bodies
from agl.testing import _openai_wire as wire
from agl.testing._openai_wire import (
    BOS_ID,
    EOS_ID,
    JSON,
    PAD_ID,
    VOCAB_SIZE,
    Reply,
    ToolCall,
    decode,
    encode,
    last_user_text,
    render_chat,
)

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "VOCAB_SIZE",
    "OpenAIServer",
    "RecordedRequest",
    "Reply",
    "Script",
    "ScriptResult",
    "ToolCall",
    "decode",
    "echo",
    "encode",
    "error_reply",
    "last_user_text",
    "render_chat",
    "sequence",
    "text_reply",
    "tool_reply",
]

logger = logging.getLogger(__name__)


# --- scripting --------------------------------------------------------------------------------


ScriptResult = Reply | str | Sequence[Reply | str]
"""A reply for every choice, or one per choice (cycled through when there are fewer)."""
Script = Callable[[dict[str, Any]], ScriptResult | Awaitable[ScriptResult]]
"""Maps a request's JSON body to the reply; may be ``async``. A plain string is a text reply."""


def text_reply(text: str, *, delay: float = 0.0, chunk_delay: float = 0.0) -> Reply:
    """Answer with ``text``."""
    return Reply(text=text, delay=delay, chunk_delay=chunk_delay)


def tool_reply(
    name: str,
    arguments: Mapping[str, Any] | str | None = None,
    *,
    id: str | None = None,
    delay: float = 0.0,
    chunk_delay: float = 0.0,
) -> Reply:
    """Answer with one call of function ``name`` (for several, build a :class:`Reply`), whose
    call id is ``id`` (default: a fresh one)."""
    call = ToolCall(name, {} if arguments is None else arguments, id=id)
    return Reply(tool_calls=(call,), delay=delay, chunk_delay=chunk_delay)


def error_reply(
    status: int, message: str, *, error_type: str | None = None, delay: float = 0.0
) -> Reply:
    """Answer with HTTP ``status`` and an OpenAI error body carrying ``message``."""
    return Reply(status=status, message=message, error_type=error_type, delay=delay)


def echo(request: dict[str, Any]) -> Reply:
    """The default script: ``"ok: <the last user message>"``."""
    return Reply(text=f"ok: {last_user_text(request)}")


def sequence(*replies: ScriptResult) -> Script:
    """A script answering with ``replies`` in turn, then with a 500 error saying it ran out."""
    pending = list(replies)
    lock = threading.Lock()

    def script(_: dict[str, Any]) -> ScriptResult:
        with lock:
            if pending:
                return pending.pop(0)
        return error_reply(500, f"the scripted server ran out of replies (had {len(replies)})")

    return script


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received: ``body`` is the parsed JSON (``None`` if none)."""

    method: str
    path: str
    body: Any
    headers: dict[str, str]


# --- the app ----------------------------------------------------------------------------------


@dataclass
class _State:
    script: Script
    max_model_len: int
    model: str
    weight_version: int | None = None
    log: list[RecordedRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def record(self, request: Request) -> Any:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except (ValueError, RecursionError):
            body = None
        entry = RecordedRequest(request.method, request.url.path, body, dict(request.headers))
        with self.lock:
            self.log.append(entry)
        if request.method == "POST" and not isinstance(body, dict):
            return read_json(raw)  # raises the error that says what is wrong with it
        return body

    async def ask(self, body: dict[str, Any], choices: int) -> list[Reply]:
        """Run the script; wait its delay; raise its error, if it chose one."""
        try:
            asked = copy.deepcopy(body)
        except RecursionError:
            raise WireError("the request body is nested too deeply to read") from None
        try:
            result = self.script(asked)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            logger.exception("the script failed")
            message = f"the script raised {type(exc).__name__}: {exc}"
            raise WireError(message, status=500) from None
        items = [result] if isinstance(result, Reply | str) else list(result)
        replies = [Reply(text=r) if isinstance(r, str) else r for r in items]
        if not replies:
            raise WireError("the script returned no reply", status=500)
        replies = [replies[i % len(replies)] for i in range(choices)]
        await asyncio.sleep(max(r.delay for r in replies))
        for reply in replies:
            if reply.status is not None:
                raise WireError(reply.message, status=reply.status, kind=reply.error_type)
        return replies

    def headers(self) -> dict[str, str]:
        """The headers of an answer: the weight version, when the server names one."""
        version = self.weight_version
        return {} if version is None else {WEIGHT_VERSION_HEADER: str(version)}


def _calls(reply: Reply, prefix: str) -> list[tuple[str, str, str]]:
    return [(c.id or new_id(prefix), c.name, c.arguments_json) for c in reply.tool_calls]


def _head(asked: WireRequest, api: Literal["chat", "completions"], model: str) -> JSON:
    return head(api, asked.model or model)


def _stream(events: Iterator[str], replies: Sequence[Reply]) -> StreamingResponse:
    pause = max(r.chunk_delay for r in replies)

    async def send() -> AsyncIterator[str]:
        for i, event in enumerate(events):
            if i and pause:
                await asyncio.sleep(pause)
            yield event

    return StreamingResponse(send(), media_type="text/event-stream")


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(WireError)
    async def failure(_: Request, exc: WireError) -> JSONResponse:
        body = error_body(exc.status, exc.message, param=exc.field, kind=exc.kind)
        return JSONResponse(body, status_code=exc.status)

    @app.exception_handler(Exception)
    async def crash(_: Request, exc: Exception) -> JSONResponse:
        message = f"the scripted server failed: {type(exc).__name__}: {exc}"
        return JSONResponse(error_body(500, message), status_code=500)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        body = error_body(exc.status_code, str(exc.detail))
        return JSONResponse(body, status_code=exc.status_code)


def _install_weight_version(app: FastAPI, state: _State) -> None:
    @app.middleware("http")
    async def name_the_weights(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        response.headers.update(state.headers())
        return response


def _install_other_wires(
    app: FastAPI, state: _State, chat: Callable[[dict[str, Any]], Awaitable[Response]]
) -> None:
    """vLLM's ``/tokenize``, and the Responses and Messages APIs served through ``chat``."""

    @app.post("/tokenize")
    async def tokenize(request: Request) -> Response:
        body = await state.record(request)
        if "messages" in body:
            asked = read_request(body, "chat")
            tokens = encode(render_chat(asked.messages or [], asked.tools))
        else:
            tokens = wire.prompt_ids(read_request(body, "completions").prompts or [""])[0]
        return JSONResponse(
            {"count": len(tokens), "max_model_len": state.max_model_len, "tokens": tokens}
        )

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        body = await state.record(request)
        return await serve_wire(WIRES["responses"], body, request.headers, chat)

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        try:
            body = await state.record(request)
        except WireError as exc:
            return WIRES["messages"].error_response(exc.status, exc.message)
        return await serve_wire(WIRES["messages"], body, request.headers, chat)


def _create_app(state: _State) -> FastAPI:
    app = FastAPI(title="agl scripted OpenAI server", version="1")

    _install_error_handlers(app)
    _install_weight_version(app, state)

    @app.get("/health")
    async def health(request: Request) -> Response:
        await state.record(request)
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        await state.record(request)
        return model_list(state.model, state.max_model_len)

    async def answer_chat(body: dict[str, Any]) -> Response:
        asked = read_request(body, "chat")
        prompt = encode(render_chat(asked.messages or [], asked.tools))
        limit = check_context(len(prompt), asked.max_tokens, state.max_model_len)
        replies = await state.ask(body, asked.n)
        gens = [wire.generate(r.text, _calls(r, "chatcmpl-tool-"), limit) for r in replies]
        head = _head(asked, "chat", state.model)
        ids, top = asked.return_token_ids, asked.logprobs
        if asked.stream:
            events = bodies.chat_stream(head, gens, prompt, ids, top, asked.include_usage)
            return _stream(events, replies)
        return JSONResponse(bodies.chat_completion(head, gens, prompt, ids, top))

    async def chat_or_error(body: dict[str, Any]) -> Response:
        try:
            return await answer_chat(body)
        except WireError as exc:
            error = error_body(exc.status, exc.message, param=exc.field, kind=exc.kind)
            return JSONResponse(error, status_code=exc.status)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await answer_chat(await state.record(request))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        body = await state.record(request)
        asked = read_request(body, "completions")
        prompts = wire.prompt_ids(asked.prompts or [])
        max_tokens = 16 if asked.max_tokens is None else asked.max_tokens  # vLLM's default
        limits = [check_context(len(p), max_tokens, state.max_model_len) for p in prompts]
        n = asked.n
        replies = await state.ask(body, n * len(prompts))
        items = []
        for i, reply in enumerate(replies):
            raw = wire.tool_calls_text(_calls(reply, "")) if reply.tool_calls else reply.text
            items.append((prompts[i // n], wire.generate(raw, (), limits[i // n])))
        head = _head(asked, "completions", state.model)
        prompt_tokens = sum(len(p) for p in prompts)
        ids, top = asked.return_token_ids, asked.logprobs
        if asked.stream:
            events = bodies.completion_stream(
                head, items, prompt_tokens, ids, top, asked.include_usage
            )
            return _stream(events, replies)
        return JSONResponse(bodies.completion(head, items, prompt_tokens, ids, top))

    _install_other_wires(app, state, chat_or_error)

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def unknown(request: Request, path: str) -> Response:
        await state.record(request)
        message = f"no route {request.method} /{path} on the scripted server"
        raise WireError(message, status=404)

    return app


# --- the server -------------------------------------------------------------------------------


class OpenAIServer(ServerThread):
    """The scripted server on a background thread; ``port=0`` picks a free port.

    Example::

        with OpenAIServer(sequence("first", "second")) as server:
            client = openai.OpenAI(base_url=server.url, api_key="test")

    Args:
        script: Decides every reply; :func:`echo` when ``None``. Can be swapped any time
            through :attr:`script`.
        max_model_len: Prompt plus generation may not exceed this many tokens.
        model: The model ``/v1/models`` lists (requests' ``model`` is echoed whatever it is).
        host: The address to bind.
        port: The port to bind; 0 for a free one.
        log_level: uvicorn's log level.
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        max_model_len: int = 8192,
        model: str = "agl-test-model",
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
    ) -> None:
        super().__init__(host=host, port=port, log_level=log_level)
        self._state = _State(script or echo, max_model_len, model)

    thread_name = "agl-openai-server"

    @property
    def url(self) -> str:
        """The base URL, ending in ``/v1`` (empty until started)."""
        return f"{self.base_url}/v1" if self.base_url else ""

    @property
    def script(self) -> Script:
        """The script answering requests from now on."""
        return self._state.script

    @script.setter
    def script(self, script: Script) -> None:
        self._state.script = script

    @property
    def weight_version(self) -> int | None:
        """The weight version every answer names (``x-agl-weight-version``), as agl-torch's
        policy server does; None (the default) names none. Set it to act out an update."""
        return self._state.weight_version

    @weight_version.setter
    def weight_version(self, version: int | None) -> None:
        self._state.weight_version = version

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, oldest first."""
        with self._state.lock:
            return list(self._state.log)

    @property
    def request_count(self) -> int:
        """How many requests the server has received."""
        with self._state.lock:
            return len(self._state.log)

    def clear_requests(self) -> None:
        """Forget the requests received so far."""
        with self._state.lock:
            self._state.log.clear()

    def create_app(self) -> Any:
        return _create_app(self._state)
