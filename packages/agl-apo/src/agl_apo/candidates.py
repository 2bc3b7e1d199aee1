"""Choosing among candidates: the beam, the Pareto front, pairs worth merging, valid templates.

Every candidate is scored on the same validation items, so candidates compare item by item:

- the **beam** keeps the ``beam_width`` best by mean score;
- the **Pareto front** holds the candidates that are best (ties included) on at least one item
  and that no other candidate matches or beats on every item while beating on one. A front
  member outside the beam is kept too (up to ``front_size`` of them, those best alone on the
  most items first): a prompt that solves what the others do not is worth expanding even when
  its average is lower;
- two front members that each beat the other on some items are **complementary**: the optimizer
  is asked to merge them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from agl import AglError, PromptTemplate
from agl_apo.state import Candidate

__all__ = [
    "CandidateError",
    "check_template",
    "complementary_pair",
    "pareto_front",
    "rank",
    "select_beam",
]


class CandidateError(AglError):
    """A rewritten template APO cannot use (it does not parse, or its placeholders changed)."""


def rank(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Best mean score first; among equals, the earlier candidate first."""
    order = {candidate.id: index for index, candidate in enumerate(candidates)}
    return sorted(candidates, key=lambda c: (-c.score, order[c.id]))


def pareto_front(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The candidates best on some item and dominated by none, in :func:`rank` order.

    Of candidates with identical scores on every item only the first is kept.
    """
    if not candidates:
        return []
    items = range(min(len(candidate.scores) for candidate in candidates))
    tops = [max(candidate.scores[i] for candidate in candidates) for i in items]
    front: list[Candidate] = []
    for candidate in rank(candidates):
        if not any(candidate.scores[i] >= tops[i] for i in items):
            continue
        if any(_dominates(other, candidate, items) for other in candidates):
            continue
        if any(_same(member, candidate, items) for member in front):
            continue
        front.append(candidate)
    return front


def select_beam(
    candidates: Sequence[Candidate], beam_width: int, *, pareto: bool, front_size: int
) -> tuple[list[Candidate], list[Candidate]]:
    """Return the next beam (the best, then front members beside them) and the front."""
    ranked = rank(candidates)
    beam = ranked[:beam_width]
    if not pareto:
        return beam, []
    front = pareto_front(candidates)
    chosen = {candidate.id for candidate in beam}
    extras = [candidate for candidate in front if candidate.id not in chosen]
    extras.sort(key=lambda c: -_sole_wins(c, candidates))  # stable: rank order among equals
    return beam + extras[:front_size], front


def complementary_pair(
    front: Sequence[Candidate], merged: Collection[frozenset[str]]
) -> tuple[Candidate, Candidate] | None:
    """The two front members that best complement each other, not merged before (or None).

    Complementary: each beats the other on at least one item. The pair whose lesser side wins
    the most items comes first, then the pair with the most such items in all.
    """
    best: tuple[tuple[int, int], tuple[Candidate, Candidate]] | None = None
    for i, first in enumerate(front):
        for second in front[i + 1 :]:
            if frozenset((first.id, second.id)) in merged:
                continue
            pairs = list(zip(first.scores, second.scores, strict=False))
            first_wins = sum(a > b for a, b in pairs)
            second_wins = sum(b > a for a, b in pairs)
            if not first_wins or not second_wins:
                continue
            key = (min(first_wins, second_wins), first_wins + second_wins)
            if best is None or key > best[0]:
                best = (key, (first, second))
    return best[1] if best is not None else None


def wins(candidate: Candidate, other: Candidate) -> list[int]:
    """The items on which ``candidate`` beats ``other``."""
    return [
        index
        for index, (a, b) in enumerate(zip(candidate.scores, other.scores, strict=False))
        if a > b
    ]


def check_template(
    text: str, engine: str, required: Collection[str], allowed: Collection[str]
) -> PromptTemplate:
    """Return ``text`` as a :class:`~agl.PromptTemplate` if an agent can use it in the seed's place.

    Raises:
        CandidateError: the template does not parse or does not format, lost a placeholder in
            ``required``, or uses one outside ``allowed`` (the agent would not fill it in).
    """
    try:
        template = PromptTemplate.model_validate({"template": text, "engine": engine})
        names = template.variables()
    except Exception as exc:  # pydantic, f-string and jinja2 parsers each raise their own
        raise CandidateError(f"the template does not parse: {_first_line(exc)}") from exc
    missing = sorted(set(required) - names)
    if missing:
        raise CandidateError(f"the template lost the placeholders {missing}")
    unknown = sorted(names - set(allowed))
    if unknown:
        raise CandidateError(
            f"the template uses placeholders {unknown} the agent does not fill in "
            f"(it fills {sorted(allowed)})"
        )
    try:
        template.format(**dict.fromkeys(names, "x"))
    except Exception as exc:
        raise CandidateError(f"the template does not format: {_first_line(exc)}") from exc
    return template


def _dominates(first: Candidate, second: Candidate, items: range) -> bool:
    at_least = all(first.scores[i] >= second.scores[i] for i in items)
    return at_least and any(first.scores[i] > second.scores[i] for i in items)


def _same(first: Candidate, second: Candidate, items: range) -> bool:
    return all(first.scores[i] == second.scores[i] for i in items)


def _sole_wins(candidate: Candidate, candidates: Sequence[Candidate]) -> int:
    """Items on which ``candidate`` beats every other candidate."""
    others = [other for other in candidates if other.id != candidate.id]
    return sum(
        all(score > other.scores[i] for other in others) for i, score in enumerate(candidate.scores)
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
