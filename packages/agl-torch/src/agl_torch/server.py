"""An OpenAI-compatible policy server for a transformers causal LM, in vLLM's wire format.

:class:`PolicyServer` serves a model from a :class:`~agl_torch.engine.GenerationEngine` over
HTTP, so that agents (through agl's gateway or not) talk to the policy being trained exactly as
they would talk to ``vllm serve``::

    with PolicyServer("models/tiny", model_name="policy") as server:
        client = openai.OpenAI(base_url=server.url, api_key="-")
        ...
        server.update_weights(learner.model.state_dict())   # the next requests use them

or from a shell: ``python -m agl_torch.server --model models/tiny --port 8000``.

Routes: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (streaming or not), ``POST
/v1/responses`` (the OpenAI Responses API) and ``POST /v1/messages`` (the Anthropic Messages API),
both served through the chat route by :func:`agl.openai_wire.serve_wire`, as the gateway serves them
(so an agent on any wire trains on CPU through the same translation), ``POST /tokenize`` (vLLM's: a
chat's or a prompt's token ids and count), ``GET /v1/models`` (with vLLM's ``max_model_len``), ``GET
/health``, and for training loops ``GET /agl/weights`` (``{"version": n}``) and ``POST
/agl/weights`` with ``{"path": folder}`` (load a ``save_pretrained`` folder; answers with the new
version once it is in use).

**vLLM's format.** With ``"return_token_ids": true`` a chat body carries top-level
``prompt_token_ids`` and per-choice ``token_ids``; a chat stream carries ``prompt_token_ids`` on
its first chunk and each token's id in its chunk's ``token_ids``; completions carry both per
choice. Chat logprobs (``logprobs: true``, ``top_logprobs: k``) come as ``{"content": [{token,
logprob, bytes, top_logprobs}]}``, completions logprobs (``logprobs: k``) as ``{tokens,
token_logprobs, top_logprobs, text_offset}``. Logprobs are the raw model distribution's (before
temperature and top-p). Errors are OpenAI error bodies (``{"error": {"message", "type", "param",
"code"}}``), 400 for any invalid request. Requests are read, and bodies built, by
:mod:`agl.openai_wire`, as in every agl server: the checks and messages are ``vllm serve``'s.

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

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from agl import AglError, InvalidInputError, ServerThread
from agl.openai_wire import WIRES, Api, Wire, WireError, model_list, serve_wire
from agl_torch._vllm_requests import JSON, GenerationRequest, read_body, read_generation
from agl_torch._vllm_responses import (
    VERSION_HEADER,
    Reply,
    TokenTexts,
    error_response,
    fingerprint,
)
from agl_torch.engine import GenerationEngine, WeightsLike
from agl_torch.policy import load_policy

if TYPE_CHECKING:
    import torch

__all__ = ["VERSION_HEADER", "PolicyServer", "create_app", "fingerprint", "main"]


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
            model, tokenizer = _load(Path(model), tokenizer, device)
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


def _load(path: Path, tokenizer: Any, device: str | torch.device | None) -> tuple[Any, Any]:
    """Load a model folder (and its tokenizer unless given) without transformers' chatter."""
    if not (path / "config.json").is_file():
        raise InvalidInputError(
            f"{path} is not a Hugging Face model folder (no config.json)",
            field="model",
            value=str(path),
        )
    return load_policy(
        path, device=device if device is not None else "cpu", tokenizer=tokenizer, quiet=True
    )


# --- the app ----------------------------------------------------------------------------------


def create_app(engine: GenerationEngine, model_name: str = "policy") -> FastAPI:
    """The FastAPI app serving ``engine`` (which must be started to answer generations)."""
    tokenizer = engine.tokenizer
    texts = TokenTexts(tokenizer)
    app = FastAPI(title="agl-torch policy server", version="1")

    @app.exception_handler(InvalidInputError)
    async def invalid(_: Request, exc: InvalidInputError) -> JSONResponse:
        status = exc.status if isinstance(exc, WireError) else 400
        return error_response(status, exc.message, param=exc.field)

    @app.exception_handler(AglError)
    async def unavailable(_: Request, exc: AglError) -> JSONResponse:
        return error_response(503, exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def crash(_: Request, exc: Exception) -> JSONResponse:
        return error_response(500, f"the policy server failed: {type(exc).__name__}: {exc}")

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> JSON:
        return model_list(model_name, engine.max_model_len, owned_by="agl")

    @app.get("/agl/weights")
    async def weights() -> JSON:
        return {"version": engine.version}

    @app.post("/agl/weights")
    async def load_weights(request: Request) -> JSON:
        path = (await read_body(request)).get("path")
        if not isinstance(path, str) or not path:
            raise InvalidInputError(
                "'path' must be the path of a model folder", field="path", value=path
            )
        return {"version": await engine.update_weights_async(path)}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await generate(read_generation(await read_body(request), "chat", tokenizer))

    async def chat_or_error(body: JSON) -> Response:
        """The chat route's answer to a translated request, errors included."""
        try:
            return await generate(read_generation(body, "chat", tokenizer))
        except InvalidInputError as exc:
            status = exc.status if isinstance(exc, WireError) else 400
            return error_response(status, exc.message, param=exc.field)
        except AglError as exc:
            return error_response(503, exc.message)

    async def serve(wire: Wire, request: Request) -> Response:
        try:
            body = await read_body(request)
        except WireError as exc:
            return wire.error_response(exc.status, exc.message, exc.field)
        return await serve_wire(wire, body, request.headers, chat_or_error)

    @app.post("/tokenize")
    async def tokenize(request: Request) -> JSON:
        body = await read_body(request)
        api: Api = "chat" if "messages" in body else "completions"
        prompt = read_generation(body, api, tokenizer).prompt
        return {"count": len(prompt), "max_model_len": engine.max_model_len, "tokens": prompt}

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        return await serve(WIRES["responses"], request)

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        return await serve(WIRES["messages"], request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        body = await read_body(request)
        return await generate(read_generation(body, "completions", tokenizer))

    async def generate(request: GenerationRequest) -> Response:
        reply = Reply(request, texts, model_name)
        if request.wire.stream:
            return await reply.stream(engine.stream(request.prompt, request.params))
        return reply.respond(await engine.generate(request.prompt, request.params))

    return app


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
