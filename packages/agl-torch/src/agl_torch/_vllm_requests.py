"""Turn chat and completions requests into prompt ids and sampling for the engine.

:func:`agl.openai_wire.read_request` reads and checks the body with the messages ``vllm serve``
gives (the same reader the scripted test server uses); this module adds what this server
serves: one choice of one prompt, a chat rendered with the model's own chat template, no
``echo``. A refused request raises :class:`~agl.openai_wire.WireError` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request

from agl.openai_wire import Api, WireError, WireRequest, content_text, read_json, read_request
from agl_torch.engine import SamplingParams

JSON = dict[str, Any]


@dataclass(frozen=True)
class GenerationRequest:
    """A chat or completions request, read and checked.

    Attributes:
        wire: The request as read off the wire.
        prompt: The prompt's token ids (a chat's rendered with the chat template).
        params: How to sample.
    """

    wire: WireRequest
    prompt: list[int]
    params: SamplingParams

    @property
    def chat(self) -> bool:
        """A chat request (else a completions one)."""
        return self.wire.api == "chat"


async def read_body(request: Request) -> JSON:
    """The JSON object an HTTP request carries."""
    return read_json(await request.body())


def read_generation(body: JSON, api: Api, tokenizer: Any) -> GenerationRequest:
    """A ``/v1/chat/completions`` or ``/v1/completions`` request, for ``tokenizer``'s model."""
    wire = read_request(body, api)
    if wire.n != 1:
        raise WireError(
            f"'n' must be 1: this server generates one choice per request (got {wire.n})",
            field="n",
            value=wire.n,
        )
    if wire.echo:
        raise WireError("'echo' is not supported", field="echo", value=True)
    prompt = _chat_prompt(wire, tokenizer) if api == "chat" else _prompt_ids(wire, tokenizer)
    max_tokens = wire.max_tokens
    if max_tokens is None and api == "completions":
        max_tokens = 16  # vLLM's default
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if wire.temperature is None else wire.temperature,
        top_p=1.0 if wire.top_p is None else wire.top_p,
        stop=wire.stop,
        seed=wire.seed,
        top_logprobs=wire.logprobs or 0,
    )
    return GenerationRequest(wire, prompt, params)


def _chat_prompt(wire: WireRequest, tokenizer: Any) -> list[int]:
    for index, message in enumerate(wire.messages or []):
        parts = message.get("content")
        for at, part in enumerate(parts if isinstance(parts, list) else []):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text":
                raise WireError(
                    f"messages[{index}].content[{at}] is a {kind!r} part: this model takes text "
                    "only (a causal LM served by agl-torch)",
                    field=f"messages[{index}].content[{at}]",
                )
    messages = [{**m, "content": content_text(m.get("content"))} for m in wire.messages or []]
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=wire.tools, add_generation_prompt=True, tokenize=False
        )
    except Exception as exc:  # a template error: the messages do not fit it
        raise WireError(
            f"the chat template cannot render these messages: {exc}", field="messages"
        ) from exc
    return list(tokenizer.encode(text, add_special_tokens=False))


def _prompt_ids(wire: WireRequest, tokenizer: Any) -> list[int]:
    prompts = wire.prompts or []
    if len(prompts) != 1:
        raise WireError(
            f"'prompt' must be one prompt: this server answers one per request "
            f"(got {len(prompts)})",
            field="prompt",
        )
    prompt = prompts[0]
    return list(tokenizer.encode(prompt)) if isinstance(prompt, str) else prompt
