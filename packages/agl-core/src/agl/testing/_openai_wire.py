"""The model side of :mod:`agl.testing.openai_server`: replies, tokenizer, template, logprobs.

Pure functions: requests in (checked the way vLLM checks them), :class:`Reply` objects turned
into tokens and logprobs out; :mod:`agl.testing._openai_bodies` puts those into response bodies
(requests are read, and bodies built, by :mod:`agl.openai_wire`, as every agl server does).
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

from agl.openai_wire import Logprob, TokenLogprobs, WireError, content_text

BOS_ID, EOS_ID, PAD_ID = 0, 1, 2
"""The reserved special token ids; byte ``b`` is token ``b + 3``."""
VOCAB_SIZE = 256 + 3
_SPECIAL_TEXT = {BOS_ID: "<s>", EOS_ID: "<|im_end|>", PAD_ID: "<pad>"}
_END_OF_TURN = "<|im_end|>"

JSON = dict[str, Any]


# --- tokenizer and chat template --------------------------------------------------------------


def encode(text: str) -> list[int]:
    """Tokenize ``text``: one token per UTF-8 byte, id = byte value + 3. No BOS is added.

    The chat template's end-of-turn marker ``<|im_end|>`` is one token, EOS, as in ChatML
    models whose EOS is ``<|im_end|>``: a finished reply's last token is the same token the
    next prompt has after that reply, so multi-turn prompts extend earlier prompt + response.
    """
    if _END_OF_TURN not in text:
        return [byte + 3 for byte in text.encode("utf-8", "surrogatepass")]
    ids: list[int] = []
    for index, piece in enumerate(text.split(_END_OF_TURN)):
        if index:
            ids.append(EOS_ID)
        ids.extend(byte + 3 for byte in piece.encode("utf-8", "surrogatepass"))
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


def last_user_text(request: Mapping[str, Any]) -> str:
    """The last user message's text of a chat or completions request body (the script sees
    requests on other wires as the chat requests they become)."""
    if "prompt" in request:
        prompt = request["prompt"]
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
            prompt = prompt[-1]
        return prompt if isinstance(prompt, str) else decode(prompt)
    messages = request.get("messages") or []
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
    decreasing; the alternatives are printable ASCII bytes other than the sampled token, so at
    most 96 come back whatever ``k`` is (the wire allows 20: ``MAX_TOP_LOGPROBS``).
    """
    best = -round(_unit(position, token_id) * 0.5, 6)
    out = [(token_id, best)]
    offset = int(_unit("alt", position, token_id) * 95)
    candidate = 0
    while len(out) < k and candidate < 95:  # 95 printable bytes: each is tried once
        alt = 32 + (offset + 37 * candidate) % 95 + 3
        candidate += 1
        if alt != token_id and all(alt != t for t, _ in out):
            out.append((alt, round(out[-1][1] - 0.5 - _unit(position, alt), 6)))
    return out


def logprobs(token_ids: Sequence[int], start: int, top: int) -> list[TokenLogprobs]:
    """Logprobs of tokens at positions ``start``, ``start + 1``..., ``top`` alternatives each."""
    out = []
    for pos, tok in enumerate(token_ids, start):
        best = top_candidates(pos, tok, max(top, 1))
        cands = [Logprob(token_text(t), lp, token_bytes(t)) for t, lp in best]
        out.append(TokenLogprobs(cands[0], cands[:top]))
    return out


def text_offset(token_ids: Sequence[int]) -> int:
    """The length of the text ``token_ids`` show in legacy logprobs (their ``text_offset``)."""
    return sum(len(token_text(t)) for t in token_ids)


# --- prompts --------------------------------------------------------------------------------


def prompt_ids(prompts: Sequence[str | list[int]]) -> list[list[int]]:
    """Completions prompts (text or token ids) as token ids, each id in the vocabulary."""
    out = []
    for item in prompts:
        ids = encode(item) if isinstance(item, str) else item
        bad = [t for t in ids if not 0 <= t < VOCAB_SIZE]
        if bad:
            raise WireError(f"Token id {max(bad)} is out of vocabulary", field="prompt")
        out.append(ids)
    return out
