"""Tiny causal language models built in code: a tokenizer, a chat template and random weights.

Nothing is downloaded. :func:`build_tiny_model` trains a byte-level BPE tokenizer with the
``tokenizers`` library on a corpus you give it (so the text your agent exchanges compresses
into few tokens), pairs it with a ChatML chat template that renders tools and tool calls the
way Qwen-style models and vLLM's ``hermes`` tool parser do, builds a small Llama-style model
with random weights, and saves all of it as a Hugging Face model folder. Everything downstream
loads it the real way (``AutoModelForCausalLM.from_pretrained(path)``)::

    path = build_tiny_model("models/tiny", corpus=texts, hidden_size=64, num_layers=2)

The template marks assistant turns with ``{% generation %}`` so that
``apply_chat_template(..., return_assistant_tokens_mask=True)`` finds the tokens SFT trains on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "CHAT_TEMPLATE",
    "END_OF_TURN",
    "PAD_TOKEN",
    "SPECIAL_TOKENS",
    "TOOL_TOKENS",
    "build_tiny_model",
    "build_tokenizer",
    "render_tool_call",
]

END_OF_TURN = "<|im_end|>"
"""Ends every turn; the tokenizer's EOS, so a reply's last token is the one the next prompt
has after that reply (multi-turn prompts extend the earlier prompt + response)."""
START_OF_TURN = "<|im_start|>"
PAD_TOKEN = "<|endoftext|>"
TOOL_TOKENS = ["<tool_call>", "</tool_call>"]
"""Wrap a tool call's JSON (hermes style); whole tokens, but text (not skipped in decoding)."""
SPECIAL_TOKENS = [PAD_TOKEN, START_OF_TURN, END_OF_TURN, *TOOL_TOKENS]
"""Every token added whole (never split by BPE)."""

CHAT_TEMPLATE = (
    "{% if tools %}"
    "<|im_start|>system\n"
    "{% if messages and messages[0].role == 'system' %}{{ messages[0].content }}\n{% endif %}"
    "# Tools\n"
    "{% for tool in tools %}{% set fn = tool.function if tool.function is defined else tool %}"
    "\n{{ fn.name }}({{ (fn.parameters.properties | default({})).keys() | join(', ') }})"
    "{% endfor %}<|im_end|>\n"
    "{% elif messages and messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' %}"
    "{% elif message.role == 'assistant' %}"
    "<|im_start|>assistant\n"
    "{% generation %}"
    "{% if message.content %}{{ message.content }}{% endif %}"
    "{% for call in message.tool_calls | default([]) %}"
    "{% set fn = call.function if call.function is defined else call %}"
    '<tool_call>{"name": "{{ fn.name }}", "arguments": '
    "{% if fn.arguments is string %}{{ fn.arguments }}{% else %}{{ fn.arguments | tojson }}"
    "{% endif %}}</tool_call>"
    "{% endfor %}<|im_end|>"
    # transformers renders templates with trim_blocks: a newline right after a tag is dropped.
    "{% endgeneration %}{{ '\\n' }}"
    "{% elif message.role == 'tool' %}"
    "<|im_start|>tool\n{{ message.content }}<|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML with tools. A tool call renders as ``<tool_call>{"name": ..., "arguments": ...}
</tool_call>`` (no newlines) right after the turn's text; its arguments render as the agent
sent them (a JSON string) so a reply the model generated re-renders to the same text."""


def render_tool_call(name: str, arguments: str | Mapping[str, Any]) -> str:
    """The text a tool call renders to in :data:`CHAT_TEMPLATE` (what the model generates)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return f'<tool_call>{{"name": "{name}", "arguments": {args}}}</tool_call>'


_DEFAULT_CORPUS = [
    "Hello! How can I help you today?",
    "What is the capital of France? Paris is the capital of France.",
    "The quick brown fox jumps over the lazy dog. 0 1 2 3 4 5 6 7 8 9 + - * / = ( ) .",
    render_tool_call("calculator", {"expression": "12*7"}),
    render_tool_call("search", {"query": "tallest mountain"}),
]


def build_tokenizer(
    corpus: Iterable[str] = (),
    *,
    vocab_size: int = 512,
    whole_lines: bool = False,
    words: Sequence[str] = (),
) -> Any:
    """A byte-level BPE tokenizer trained on ``corpus``, with the chat template and specials.

    Digits stay single tokens (numbers compose the same way everywhere); any text encodes
    (unknown characters fall back to bytes) and decodes back exactly. Returns a
    ``transformers.PreTrainedTokenizerFast``.

    Args:
        corpus: The texts to train on (a small generic corpus if empty).
        vocab_size: BPE vocabulary size, special tokens included.
        whole_lines: Let merges cross spaces (never a newline): a line the corpus repeats (a
            schema, a system prompt, a query's fixed clauses) becomes one token or a few,
            where word-level merges leave one per word. For prompts that repeat long texts.
        words: Strings that are each one token wherever they appear, also inside other
            text (a task's entity names: copying one from a question is copying one token).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = list(corpus) or list(_DEFAULT_CORPUS)
    tokenizer = Tokenizer(models.BPE())
    lines = [pre_tokenizers.Split("\n", behavior="merged_with_previous")] if whole_lines else []
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            *lines,
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=not whole_lines),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    # The trainer adds every special token as "special"; the tool-call markers are text the
    # agent sees (decoding keeps them even with skip_special_tokens=True).
    tokenizer.add_tokens([AddedToken(token, special=False) for token in TOOL_TOKENS])
    tokenizer.add_tokens([AddedToken(word, special=False, normalized=False) for word in words])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=END_OF_TURN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[START_OF_TURN],
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(
    path: str | os.PathLike[str],
    *,
    corpus: Sequence[str] = (),
    vocab_size: int = 512,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 1024,
    seed: int = 0,
    whole_lines: bool = False,
    words: Sequence[str] = (),
) -> Path:
    """Build a random-init Llama-style model and its tokenizer; save both to ``path``.

    Args:
        path: The folder to write (a Hugging Face model folder; created if missing).
        corpus: Texts to train the tokenizer on (chat-rendered examples of your task give the
            shortest sequences); a small generic corpus if empty.
        vocab_size: BPE vocabulary size, special tokens included.
        hidden_size / num_layers / num_heads / intermediate_size: The model's shape
            (``intermediate_size`` defaults to 4 x ``hidden_size``).
        max_position_embeddings: The longest sequence the model takes.
        seed: Seeds the random weights (the same seed builds the same model).
        whole_lines / words: The tokenizer's (see :func:`build_tokenizer`).

    Returns:
        ``path``, as a :class:`~pathlib.Path`.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(corpus, vocab_size=vocab_size, whole_lines=whole_lines, words=words)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    from agl_torch.policy import quiet_progress_bars

    with quiet_progress_bars():
        model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
