"""The model side of :mod:`agl.testing.openai_server`: replies, tokenizer, template, logprobs.

Pure functions: requests in (checked the way vLLM checks them), :class:`Reply` objects turned
into tokens and logprobs out; :mod:`agl.testing._openai_bodies` puts those into response bodies.
The public names are re-exported by the server module, whose docstring documents the formats
and their vLLM sources.
"""

from __future__ import annotations

import codecs
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

BOS_ID, EOS_ID, PAD_ID = 0, 1, 2
"""The reserved special token ids; byte ``b`` is token ``b + 3``."""
VOCAB_SIZE = 256 + 3
_SPECIAL_TEXT = {BOS_ID: "<s>", EOS_ID: "<|im_end|>", PAD_ID: "<pad>"}
_END_OF_TURN = "<|im_end|>"

JSON = dict[str, Any]


class WireError(Exception):
    """An error the server answers with ``status`` and an OpenAI error body."""

    def __init__(self, status: int, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


# --- tokenizer and chat template --------------------------------------------------------------


def encode(text: str) -> list[int]:
    """Tokenize ``text``: one token per UTF-8 byte, id = byte value + 3. No BOS is added.

    The chat template's end-of-turn marker ``<|im_end|>`` is one token, EOS, as in ChatML
    models whose EOS is ``<|im_end|>``: a finished reply's last token is the same token the
    next prompt has after that reply, so multi-turn prompts extend earlier prompt + response.
    """
    if _END_OF_TURN not in text:
        return [byte + 3 for byte in text.encode()]
    ids: list[int] = []
    for index, piece in enumerate(text.split(_END_OF_TURN)):
        if index:
            ids.append(EOS_ID)
        ids.extend(byte + 3 for byte in piece.encode())
    return ids


def decode(token_ids: Iterable[int]) -> str:
    """Detokenize, skipping special tokens; incomplete UTF-8 at the end becomes U+FFFD."""
    return bytes(t - 3 for t in token_ids if t >= 3).decode(errors="replace")


def token_text(token_id: int) -> str:
    """One token as text, the way vLLM shows it in logprobs (specials by name)."""
    if token_id in _SPECIAL_TEXT:
        return _SPECIAL_TEXT[token_id]
    return bytes([token_id - 3]).decode(errors="replace")


def token_bytes(token_id: int) -> list[int]:
    """The raw bytes of one token (for a byte token, the byte itself, even mid-character)."""
    if token_id in _SPECIAL_TEXT:
        return list(_SPECIAL_TEXT[token_id].encode())
    return [token_id - 3]


def content_text(content: Any) -> str:
    """A message's ``content`` as text: strings as-is, text parts joined, other parts tagged."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                parts.append(text if isinstance(text, str) else f"<{part.get('type', 'part')}>")
        return "".join(parts)
    return str(content)


def tool_call_text(name: str, arguments: str, index: int = 0) -> tuple[str, str, str]:
    """A tool call as the model writes it (Hermes style): ``(head, arguments, tail)``."""
    head = ("\n" if index else "") + '<tool_call>\n{"name": ' + json.dumps(name) + ', "arguments": '
    return head, arguments, "}\n</tool_call>"


def tool_calls_text(calls: Sequence[tuple[str, str, str]]) -> str:
    """The text of tool calls ``(id, name, arguments_json)``, as a model writes them."""
    return "".join(
        "".join(tool_call_text(name, args, i)) for i, (_, name, args) in enumerate(calls)
    )


def render_chat(messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None = None) -> str:
    """Render messages with the server's ChatML-style template (see the server docstring)."""
    out = []
    if tools:
        out.append(f"<|im_start|>system\n# Tools\n{json.dumps(list(tools), sort_keys=True)}")
        out.append("<|im_end|>\n")
    for message in messages:
        text = content_text(message.get("content"))
        for i, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function", {})
            args = function.get("arguments", "{}")
            args = args if isinstance(args, str) else json.dumps(args)
            text += "".join(tool_call_text(str(function.get("name", "")), args, i))
        out.append(f"<|im_start|>{message.get('role', 'user')}\n{text}<|im_end|>\n")
    out.append("<|im_start|>assistant\n")
    return "".join(out)


def responses_messages(body: Mapping[str, Any]) -> list[JSON]:
    """Turn a Responses API request (``instructions`` + ``input``) into chat messages."""
    messages: list[JSON] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input", "")
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}]
    for item in items:
        if not isinstance(item, Mapping):
            raise WireError(400, f"'input' items must be objects (got {item!r})")
        kind = item.get("type", "message")
        if kind == "function_call":
            call = {"function": {"name": item.get("name"), "arguments": item.get("arguments")}}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "content": item.get("output")})
        else:
            messages.append({"role": item.get("role", "user"), "content": item.get("content")})
    return messages


def last_user_text(request: Mapping[str, Any]) -> str:
    """The last user message's text of a chat, completions or Responses API request body."""
    if "prompt" in request:
        prompt = request["prompt"]
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
            prompt = prompt[-1]
        return prompt if isinstance(prompt, str) else decode(prompt)
    messages = request.get("messages") or responses_messages(request)
    users = [m for m in messages if m.get("role") == "user"]
    return content_text(users[-1].get("content")) if users else ""


# --- generations: a reply as tokens, stream steps and logprobs --------------------------------


@dataclass(frozen=True)
class ToolCall:
    """A function call the scripted model makes.

    Attributes:
        name: The function's name.
        arguments: A JSON object, or the exact JSON text to send.
        id: The call id; a fresh one (``chatcmpl-tool-…``, ``call_…``) when ``None``.
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    @property
    def arguments_json(self) -> str:
        """The arguments as the JSON text the wire carries."""
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True)
class Reply:
    """What the scripted model answers (to a request, or to one of its ``n`` choices).

    Attributes:
        text: The text to answer with (unused when ``tool_calls`` or ``status`` is set).
        tool_calls: Function calls to make instead (``finish_reason="tool_calls"``).
        status: Answer with this HTTP error status instead, and an OpenAI error body.
        message: The error's message.
        error_type: The error's ``type``; by default the one vLLM uses for ``status``.
        delay: Seconds to wait before answering (errors included).
        chunk_delay: Seconds to wait between two events of a stream.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    status: int | None = None
    message: str = ""
    error_type: str | None = None
    delay: float = 0.0
    chunk_delay: float = 0.0


@dataclass
class Step:
    """One streamed chunk of one choice: its tokens and what they add."""

    start: int
    token_ids: list[int]
    text: str = ""
    tool: int | None = None
    kind: str = "content"  # content | head | args | tail | eos
    finish_reason: str | None = None


@dataclass
class Generation:
    """What the "model" produced for one choice."""

    token_ids: list[int]
    content: str | None
    tool_calls: list[JSON]
    finish_reason: str
    steps: list[Step] = field(default_factory=list)


def generate(text: str, calls: Sequence[tuple[str, str, str]], limit: int) -> Generation:
    """Tokenize a reply (``calls``: ``(id, name, arguments_json)``) and cut it at ``limit`` tokens.

    Like vLLM, a finished reply ends with the EOS token (counted in usage, skipped in text); one
    that reaches ``limit`` has no EOS and ``finish_reason="length"``, and truncated tool calls are
    left as plain text, because the tool parser cannot read them.
    """
    pieces: list[tuple[str, int | None, str]] = []
    for i, (_, name, arguments) in enumerate(calls):
        head, args, tail = tool_call_text(name, arguments, i)
        pieces += [("head", i, head), ("args", i, args), ("tail", i, tail)]
    if not calls:
        pieces = [("content", None, text)]
    tagged = [(kind, i, tok) for kind, i, piece in pieces for tok in encode(piece)]
    truncated = len(tagged) >= limit
    if truncated:
        tagged = [("content", None, tok) for _, _, tok in tagged[:limit]]
        calls = ()
    steps: list[Step] = []
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for pos, (kind, tool, tok) in enumerate(tagged):
        if steps and kind in ("head", "tail") and (steps[-1].kind, steps[-1].tool) == (kind, tool):
            steps[-1].token_ids.append(tok)
            continue
        if steps and steps[-1].kind != kind:
            steps[-1].text += decoder.decode(b"", final=True)
        piece = "" if kind in ("head", "tail") else decoder.decode(bytes([tok - 3]))
        steps.append(Step(pos, [tok], piece, tool, kind))
    if steps:
        steps[-1].text += decoder.decode(b"", final=True)
    token_ids = [tok for _, _, tok in tagged]
    if not truncated:
        steps.append(Step(len(token_ids), [EOS_ID], kind="eos"))
        token_ids.append(EOS_ID)
    if not steps:
        steps.append(Step(0, [], kind="eos"))
    finish = "length" if truncated else "tool_calls" if calls else "stop"
    steps[-1].finish_reason = finish
    tool_calls = [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
        for call_id, name, args in calls
    ]
    content = None if calls else "".join(s.text for s in steps)
    return Generation(token_ids, content, tool_calls, finish, steps)


def _unit(*key: object) -> float:
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def top_candidates(position: int, token_id: int, k: int) -> list[tuple[int, float]]:
    """The ``k`` most likely tokens at ``position``, best first; the sampled token is the best.

    Deterministic: logprobs come from a hash of (position, token), are <= 0 and strictly
    decreasing; the alternatives are printable ASCII bytes other than the sampled token.
    """
    best = -round(_unit(position, token_id) * 0.5, 6)
    out = [(token_id, best)]
    offset = int(_unit("alt", position, token_id) * 95)
    candidate = 0
    while len(out) < k:
        alt = 32 + (offset + 37 * candidate) % 95 + 3
        candidate += 1
        if alt != token_id and all(alt != t for t, _ in out):
            out.append((alt, round(out[-1][1] - 0.5 - _unit(position, alt), 6)))
    return out


def chat_logprobs(token_ids: Sequence[int], start: int, top: int) -> list[JSON]:
    """OpenAI chat logprobs ``content`` entries for tokens at positions ``start``, ``start+1``..."""
    entries = []
    for pos, tok in enumerate(token_ids, start):
        cands = top_candidates(pos, tok, max(top, 1))
        entries.append(
            {
                "token": token_text(tok),
                "logprob": cands[0][1],
                "bytes": token_bytes(tok),
                "top_logprobs": [
                    {"token": token_text(t), "logprob": lp, "bytes": token_bytes(t)}
                    for t, lp in cands[:top]
                ],
            }
        )
    return entries


def completion_logprobs(token_ids: Sequence[int], start: int, top: int, offset: int) -> JSON:
    """Legacy completions logprobs (``tokens``, ``token_logprobs``, ``top_logprobs``...)."""
    tokens, lps, tops, offsets = [], [], [], []
    for pos, tok in enumerate(token_ids, start):
        cands = top_candidates(pos, tok, max(top, 1))
        tokens.append(token_text(tok))
        lps.append(cands[0][1])
        tops.append({token_text(t): lp for t, lp in cands})
        offsets.append(offset)
        offset += len(tokens[-1])
    return {"text_offset": offsets, "token_logprobs": lps, "tokens": tokens, "top_logprobs": tops}


def text_offset(token_ids: Sequence[int]) -> int:
    """The length of the text ``token_ids`` show in legacy logprobs (their ``text_offset``)."""
    return sum(len(token_text(t)) for t in token_ids)


# --- request checks (vLLM's messages) ---------------------------------------------------------


def generation_limit(
    body: Mapping[str, Any], prompt: int, max_model_len: int, keys: Sequence[str], default: Any
) -> int:
    """vLLM's context-length checks; return how many tokens may be generated.

    Raises:
        WireError: 400 when the prompt fills the context or ``max_tokens`` does not fit.
    """
    top = max_model_len
    if prompt >= top:
        raise WireError(
            400,
            f"This model's maximum context length is {top} tokens. However, your request has "
            f"{prompt} input tokens. Please reduce the length of the input messages.",
        )
    asked = next((body[k] for k in keys if body.get(k) is not None), default)
    if asked is None:
        return top - prompt
    if not _is_int(asked) or asked < 0:
        raise WireError(400, f"{keys[0]!r} must be a non-negative integer (got {asked!r})")
    if prompt + asked > top:
        raise WireError(
            400,
            f"'max_tokens' or 'max_completion_tokens' is too large: {asked}. This model's maximum "
            f"context length is {top} tokens and your request has {prompt} input tokens "
            f"({asked} > {top} - {prompt}).",
        )
    return int(asked)


def choices(body: Mapping[str, Any]) -> int:
    """The request's ``n``, checked."""
    n = body.get("n")
    if n is None:
        return 1
    if not _is_int(n) or n < 1:
        raise WireError(400, f"'n' must be a positive integer (got {n!r})")
    return int(n)


def logprobs_wanted(body: Mapping[str, Any], chat: bool) -> int | None:
    """How many top logprobs each token gets; ``None`` for no logprobs at all.

    Chat asks with ``logprobs: true`` (+ ``top_logprobs: k``), completions with ``logprobs: k``.
    """
    value = body.get("logprobs")
    if chat:
        top = body.get("top_logprobs")
        if top is not None and not value:
            raise WireError(400, "when using `top_logprobs`, `logprobs` must be set to true.")
        value = (top or 0) if value else None
    if value is not None and (not _is_int(value) or value < 0):
        raise WireError(400, f"logprobs must be a non-negative integer (got {value!r})")
    return value


def include_usage(body: Mapping[str, Any]) -> bool:
    """Whether a stream ends with a usage chunk (``stream_options.include_usage``)."""
    options = body.get("stream_options")
    if options and not body.get("stream"):
        raise WireError(400, "Stream options can only be defined when `stream=True`.")
    return bool((options or {}).get("include_usage"))


def chat_messages(body: Mapping[str, Any]) -> list[JSON]:
    """A chat request's ``messages``, checked."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise WireError(400, "'messages' must be a list of message objects")
    return messages


def prompts(prompt: Any) -> list[list[int]]:
    """A completions ``prompt`` (text, token ids, or a list of either) as token id lists."""
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and _is_ids(prompt)):
        prompt = [prompt]
    if not isinstance(prompt, list) or not prompt:
        raise WireError(400, "'prompt' must be a string, a list of token ids, or a list of those")
    out = []
    for item in prompt:
        if not isinstance(item, str) and not (isinstance(item, list) and _is_ids(item)):
            raise WireError(
                400, f"'prompt' has an item that is neither text nor token ids: {item!r}"
            )
        ids = encode(item) if isinstance(item, str) else item
        bad = [t for t in ids if not 0 <= t < VOCAB_SIZE]
        if bad:
            raise WireError(400, f"Token id {max(bad)} is out of vocabulary")
        out.append(ids)
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_ids(items: list[Any]) -> bool:
    return all(_is_int(t) for t in items)
