"""Lone UTF-16 surrogates are replaced wherever spans get their text; valid text is untouched."""

from __future__ import annotations

from agl._text import valid_json, valid_text


def test_lone_surrogates_become_the_replacement_character() -> None:
    assert valid_text("a\ud800b\udfff") == "a\ufffdb\ufffd"
    text = "plain, ünïcode and emoji \U0001f600"
    assert valid_text(text) is text


def test_json_values_are_fixed_in_strings_keys_and_nesting_only_where_needed() -> None:
    ids = list(range(1000))
    clean = {"ids": ids, "text": "ok", "nested": [{"k": "v"}]}
    assert valid_json(clean) is clean
    dirty = {"ids": ids, "m\ud800": ["x\udc00", 1, {"deep": "\ud83d"}], "n": None}
    fixed = valid_json(dirty)
    assert fixed == {"ids": ids, "m\ufffd": ["x\ufffd", 1, {"deep": "\ufffd"}], "n": None}
    assert fixed["ids"] is ids
    fixed_text = str(fixed)
    fixed_text.encode("utf-8")  # nothing left that UTF-8 refuses
