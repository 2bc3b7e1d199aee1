"""The meta-prompts: what APO asks the optimizer model, shipped as files in ``agl_apo/prompts``.

Four texts, each a :class:`string.Template` (``$name`` placeholders, ``$$`` for a dollar sign):

- ``system``: the optimizer's system message.
- ``critique``: asks for a critique of a prompt (the "textual gradient") from recorded runs.
  Placeholders: ``$name``, ``$prompt``, ``$variables``, ``$examples``, ``$n_examples``,
  ``$context`` (the candidate's other prompts, when APO optimizes several).
- ``rewrite``: asks for a new version of a prompt from the critique, between ``<prompt>`` and
  ``</prompt>``. Placeholders: ``$name``, ``$prompt``, ``$critique``, ``$variables``,
  ``$syntax``, ``$index``, ``$count``.
- ``merge``: asks for one prompt combining two Pareto-front members, between ``<prompt>`` and
  ``</prompt>``. Placeholders: ``$name``, ``$prompt_a``, ``$prompt_b``, ``$strengths_a``,
  ``$strengths_b``, ``$variables``, ``$syntax``.

Override any of them with ``APO(meta_prompts={"critique": text_or_path})``: a ``str`` is the
text itself, a :class:`pathlib.Path` (any ``os.PathLike``) a file to read. An override must
keep the placeholders marked required in :data:`REQUIRED`.
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from agl import InvalidInputError

__all__ = ["KINDS", "REQUIRED", "MetaPrompts"]

KINDS = ("system", "critique", "rewrite", "merge")
"""The meta-prompts, by name."""

REQUIRED: dict[str, frozenset[str]] = {
    "system": frozenset(),
    "critique": frozenset({"prompt", "examples"}),
    "rewrite": frozenset({"prompt", "critique"}),
    "merge": frozenset({"prompt_a", "prompt_b"}),
}
"""The placeholders each meta-prompt must use."""


@dataclass(frozen=True)
class MetaPrompts:
    """The four meta-prompt texts (see the module docstring)."""

    system: str
    critique: str
    rewrite: str
    merge: str

    @classmethod
    def load(cls, overrides: Mapping[str, str | os.PathLike[str]] | None = None) -> MetaPrompts:
        """Return the shipped meta-prompts, with ``overrides`` (text or path) in their place.

        Raises:
            InvalidInputError: an unknown name, an unreadable file, or an override missing a
                required placeholder.
        """
        texts = {kind: _shipped(kind) for kind in KINDS}
        for kind, value in (overrides or {}).items():
            where = f"meta_prompts[{kind!r}]"
            if kind not in KINDS:
                raise InvalidInputError(
                    f"unknown meta-prompt {kind!r}; the meta-prompts are {list(KINDS)}",
                    field=where,
                    value=kind,
                )
            if isinstance(value, os.PathLike):
                try:
                    text = Path(value).read_text(encoding="utf-8")
                except OSError as exc:
                    raise InvalidInputError(
                        f"cannot read the {kind} meta-prompt from {os.fspath(value)!r}: {exc}",
                        field=where,
                        value=os.fspath(value),
                    ) from exc
            elif isinstance(value, str):
                text = value
            else:
                raise InvalidInputError(
                    f"a meta-prompt is a str (its text) or a path, got {type(value).__name__}",
                    field=where,
                )
            missing = sorted(REQUIRED[kind] - placeholders(text))
            if missing:
                raise InvalidInputError(
                    f"the {kind} meta-prompt must use the placeholders "
                    f"{['$' + name for name in missing]}",
                    field=where,
                )
            texts[kind] = text
        return cls(**texts)

    def render(self, kind: str, **values: object) -> str:
        """Fill in one meta-prompt; placeholders without a value stay as written."""
        text: str = getattr(self, kind)
        return string.Template(text).safe_substitute({k: str(v) for k, v in values.items()})


def placeholders(text: str) -> set[str]:
    """The ``$name`` placeholders a template text uses."""
    return {
        match.group("named") or match.group("braced")
        for match in string.Template.pattern.finditer(text)
        if match.group("named") or match.group("braced")
    }


def _shipped(kind: str) -> str:
    return resources.files("agl_apo").joinpath("prompts", f"{kind}.md").read_text(encoding="utf-8")
