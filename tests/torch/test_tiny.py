"""The tiny model's tokenizer: trained on a corpus, exact round trips, whole lines, whole words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agl_torch.tiny import build_tiny_model, build_tokenizer

SCHEMA = "CREATE TABLE employees (id INTEGER, name TEXT, salary REAL, department_id INTEGER)"
CORPUS = [
    f"{SCHEMA}\nWho works in {dept}?\nSELECT name FROM employees WHERE department_id = {n}"
    for n, dept in enumerate(["Sales", "Research", "Legal", "Support"] * 5)
]
TEXTS = [
    *CORPUS[:4],
    "  two spaces, a tab\tand a newline at the end\n",
    "unicode: café, 東京, emoji 🙂; digits 12345",
    "",
]


def _lengths(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("whole_lines", [False, True])
def test_any_text_decodes_back_exactly(whole_lines: bool) -> None:
    tokenizer = build_tokenizer(CORPUS, vocab_size=300, whole_lines=whole_lines, words=["Sales"])
    for text in TEXTS:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text


def test_whole_lines_makes_a_repeated_line_a_few_tokens() -> None:
    words = build_tokenizer(CORPUS, vocab_size=400)
    lines = build_tokenizer(CORPUS, vocab_size=400, whole_lines=True)
    assert _lengths(words, SCHEMA + "\n") >= 15  # a token per word and punctuation mark
    assert _lengths(lines, SCHEMA + "\n") == 1
    # schema, question and query: a token per line and one for the digit
    assert _lengths(words, CORPUS[1]) >= 30
    assert _lengths(lines, CORPUS[1]) == 4
    # merges never cross a newline: the question's line is still its own tokens
    two = lines(f"{SCHEMA}\nWho works in Sales?", add_special_tokens=False)["input_ids"]
    pieces = [lines.decode([i]) for i in two]
    assert any(piece.endswith("\n") for piece in pieces)
    assert not any("\n" in piece.rstrip("\n") for piece in pieces)
    # digits stay single tokens either way
    assert _lengths(lines, "12345") == 5


def test_each_word_is_one_token_wherever_it_appears() -> None:
    tokenizer = build_tokenizer(CORPUS, vocab_size=300, words=["Lisbon", "São Paulo"])
    for text in ["Lisbon", "in Lisbon?", "'Lisbon'", "São Paulo", "from São Paulo."]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
        word = "Lisbon" if "Lisbon" in text else "São Paulo"
        assert tokenizer.convert_tokens_to_ids(word) in ids, text


def test_the_model_folder_keeps_the_tokenizer_options(tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    path = build_tiny_model(
        tmp_path / "m", corpus=CORPUS, vocab_size=400, whole_lines=True, words=["Lisbon"]
    )
    tokenizer: Any = AutoTokenizer.from_pretrained(path)
    assert _lengths(tokenizer, CORPUS[1]) == 4
    assert _lengths(tokenizer, "Lisbon") == 1
    assert AutoConfig.from_pretrained(path).vocab_size == len(tokenizer)
