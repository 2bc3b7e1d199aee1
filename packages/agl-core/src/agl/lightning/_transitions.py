"""Transitions, the training samples credit assignment produces, and batches of them.

A :class:`Transition` is one sample: the prompt the engine saw, the tokens it produced (with
their logprobs under the sampling policy), and the return and advantage credit assignment gave
them. Its fields map one for one onto what verl's ``DataProto`` and a plain PyTorch policy-
gradient loss need; :meth:`TransitionBatch.to_arrays` / :meth:`~TransitionBatch.to_tensors`
lay a batch out as padded arrays, and :meth:`~TransitionBatch.to_jsonl` /
:meth:`~TransitionBatch.to_parquet` write it for offline use (SFT, analysis, another trainer).
"""

from __future__ import annotations

import itertools
import json
import os
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from agl._errors import AglError, InvalidInputError

__all__ = ["DropReport", "Transition", "TransitionBatch"]


@dataclass(slots=True)
class Transition:
    """One training sample: one LLM call, or (trajectory mode) several merged into one.

    Attributes:
        agent: The agent that made the call(s) (None when no agent span named one).
        prompt_ids: The prompt's token ids, as the engine tokenized it.
        response_ids: The response's token ids; in a merged sample, every later call's new
            prompt tokens (tool results, observations) are in here too, masked out.
        response_logprobs: The logprob of each response token under the policy that sampled
            it (0.0 at masked positions), or None when the engine did not return them.
        reward: The return credit assignment gave the (last) call.
        advantage: The advantage of the (last) call.
        rollout_id / attempt_id: Where the sample came from.
        group_id: The rollouts sharing a baseline (the ``n`` samples of one task).
        step: The training step the sample was built for.
        call_index: The position of the (first) call in its attempt.
        n_calls: How many calls the sample merges (1 outside trajectory mode).
        response_mask: 1 for tokens the model produced, 0 for observation tokens; None means
            all ones.
        token_advantages: Per response token advantage, for merged samples whose calls have
            different advantages (None: :attr:`advantage` on every unmasked token).
        weight: ``1 / (samples of its rollout and agent)``: weighting a loss by it makes every
            rollout count once, however many calls it made.
        weight_version: The version of the weights that produced the sample's tokens (the
            oldest, for a merged sample), or None when the engine did not name it for every
            call.
    """

    agent: str | None
    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float] | None
    reward: float
    advantage: float
    rollout_id: str
    group_id: str
    step: int = 0
    attempt_id: str = ""
    call_index: int = 0
    n_calls: int = 1
    response_mask: list[int] | None = None
    token_advantages: list[float] | None = None
    weight: float = 1.0
    weight_version: int | None = None

    def mask(self) -> list[int]:
        """The response mask, all ones when :attr:`response_mask` is None."""
        return (
            self.response_mask if self.response_mask is not None else [1] * len(self.response_ids)
        )

    def per_token_advantages(self) -> list[float]:
        """The advantage of each response token (0.0 where masked)."""
        if self.token_advantages is not None:
            return self.token_advantages
        if self.response_mask is None:
            return [self.advantage] * len(self.response_ids)
        return [self.advantage if keep else 0.0 for keep in self.response_mask]


@dataclass
class DropReport:
    """What credit assignment kept and dropped, and why. Nothing is dropped silently.

    Attributes:
        calls_seen: LLM calls of selected agents in the batch's rollouts.
        transitions: Samples built.
        dropped_calls: Calls not trained, by reason: ``no_token_ids``, ``empty_response``,
            ``prompt_too_long``, ``response_too_long``, ``infrastructure_failure``,
            ``rollout_failed``, ``no_reward``, ``zero_variance_group``, ``single_rollout_group``,
            and with a staleness bound ``stale`` and ``no_weight_version``.
        dropped_rollouts: Rollouts not trained, by the same reasons.
        notes: Counts that are not drops: ``prefix_mismatch`` (a call that continues its
            agent's previous conversation by its messages while its prompt ids do not extend
            the previous prompt + response: a re-rendered history, such as reasoning dropped, a
            compacted history or an edited tool result; counted among the calls of trained
            rollouts, with or without trajectory mode; trained as a sample of its own, never
            merged), ``trajectory_breaks`` (in trajectory mode, a call that did not extend the
            previous one and started a new sample: a new conversation, or, when the messages
            were not recorded, any call that does not extend), ``trajectory_length_splits``,
            ``logprobs_mismatch`` (logprobs of the wrong length, left out),
            ``reparented_spans``, ``joined_by_order``, ``gateway_only``, ``instrumented_only``,
            ``unmatched_rewards``, ``other_agents_calls``. :mod:`agl.lightning._samples` says
            how a call is told to extend, break or re-render.
        rollout_reasons: Why each dropped rollout was dropped, by rollout id.
        call_reasons: Why each dropped call was dropped, by ``(rollout_id, call_index)`` (a
            call of a dropped rollout has its rollout's reason).
        prefix_mismatches: Each re-rendered call (``prefix_mismatch``) as ``(rollout_id,
            call_index, position)``: ``position`` is the first token where its prompt ids part
            from the previous call's prompt + response ids.
    """

    calls_seen: int = 0
    transitions: int = 0
    dropped_calls: Counter[str] = field(default_factory=Counter)
    dropped_rollouts: Counter[str] = field(default_factory=Counter)
    notes: Counter[str] = field(default_factory=Counter)
    rollout_reasons: dict[str, str] = field(default_factory=dict)
    call_reasons: dict[tuple[str, int], str] = field(default_factory=dict)
    prefix_mismatches: list[tuple[str, int, int]] = field(default_factory=list)

    def drop_rollout(self, rollout_id: str, calls: Sequence[tuple[str, int]], reason: str) -> None:
        """Count a rollout dropped for ``reason``, with its selected ``calls``
        (``(rollout_id, call_index)`` pairs)."""
        self.dropped_rollouts[reason] += 1
        self.rollout_reasons[rollout_id] = reason
        if calls:
            self.dropped_calls[reason] += len(calls)
            self.call_reasons.update(dict.fromkeys(calls, reason))

    def drop_call(self, rollout_id: str, call_index: int, reason: str) -> None:
        """Count one call dropped for ``reason``."""
        self.dropped_calls[reason] += 1
        self.call_reasons[(rollout_id, call_index)] = reason

    def prefix_mismatch(self, rollout_id: str, call_index: int, position: int) -> None:
        """Count one call whose history was re-rendered, parting from the previous call's
        prompt + response ids at token ``position``."""
        self.notes["prefix_mismatch"] += 1
        self.prefix_mismatches.append((rollout_id, call_index, position))

    def as_metrics(self, prefix: str = "transitions/") -> dict[str, float]:
        """Flat metrics for :meth:`agl.AlgorithmContext.log`; ``prefix_mismatch`` is always
        there (0 when no history was re-rendered), so its curve shows the first one."""
        metrics = {
            f"{prefix}calls": float(self.calls_seen),
            f"{prefix}kept": float(self.transitions),
            f"{prefix}prefix_mismatch": 0.0,
        }
        metrics.update({f"{prefix}dropped/{k}": float(v) for k, v in self.dropped_calls.items()})
        metrics.update(
            {f"{prefix}dropped_rollouts/{k}": float(v) for k, v in self.dropped_rollouts.items()}
        )
        metrics.update({f"{prefix}{k}": float(v) for k, v in self.notes.items()})
        return metrics

    def summary(self) -> str:
        """One line: kept, re-rendered histories if any, and dropped by reason."""
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(self.dropped_calls.items()))
        text = f"{self.transitions} samples from {self.calls_seen} calls"
        if self.notes["prefix_mismatch"]:
            text += f"; {self.notes['prefix_mismatch']} re-rendered histories (prefix_mismatch)"
        return f"{text}; dropped: {dropped}" if dropped else text


class TransitionBatch(Sequence[Transition]):
    """The transitions of one step, with the report of what was dropped."""

    def __init__(self, transitions: Sequence[Transition], report: DropReport | None = None) -> None:
        self.transitions = list(transitions)
        self.report = report if report is not None else DropReport(transitions=len(transitions))

    def __len__(self) -> int:
        return len(self.transitions)

    def __getitem__(self, index: Any) -> Any:
        return self.transitions[index]

    def __iter__(self) -> Iterator[Transition]:
        return iter(self.transitions)

    def __repr__(self) -> str:
        return f"TransitionBatch({len(self)} transitions; {self.report.summary()})"

    @property
    def agents(self) -> list[str | None]:
        """The agents with samples in the batch, in order of first appearance."""
        return list(dict.fromkeys(t.agent for t in self.transitions))

    def for_agents(self, *agents: str | None) -> TransitionBatch:
        """The samples of the given agents only (same report)."""
        wanted = set(agents)
        return TransitionBatch([t for t in self.transitions if t.agent in wanted], self.report)

    # --- padded arrays ----------------------------------------------------------------------

    def to_arrays(
        self,
        *,
        pad_token_id: int = 0,
        max_prompt_length: int | None = None,
        max_response_length: int | None = None,
    ) -> dict[str, Any]:
        """Lay the batch out as padded numpy arrays (needs numpy).

        Prompts are left-padded and responses right-padded, so ``input_ids`` is
        ``[prompt | response]`` with the response starting at the same column in every row, the
        layout verl and most policy-gradient code expect. Keys (B rows, P prompt columns, R
        response columns): ``prompts`` (B, P), ``responses`` (B, R), ``input_ids`` (B, P+R),
        ``attention_mask`` (B, P+R), ``position_ids`` (B, P+R), ``response_mask`` (B, R),
        ``old_logprobs`` (B, R; 0 where unknown), ``has_logprobs`` (B,), ``advantages`` (B, R),
        ``token_rewards`` (B, R; the reward on the last response token), ``rewards`` (B,),
        ``weights`` (B,).

        Raises:
            InvalidInputError: a sample is longer than the given maximum (samples are never
                truncated silently: drop them with ``TransitionBuilder(max_prompt_length=...)``).
        """
        try:
            import numpy as np
        except ImportError as exc:  # pragma: no cover - numpy comes with every trainer
            raise AglError("TransitionBatch.to_arrays needs numpy: pip install numpy") from exc
        samples = self.transitions
        rows = len(samples)
        prompt_lengths = np.fromiter((len(t.prompt_ids) for t in samples), np.int64, rows)
        response_lengths = np.fromiter((len(t.response_ids) for t in samples), np.int64, rows)
        width_p = _width(int(prompt_lengths.max(initial=0)), max_prompt_length, "prompt")
        width_r = _width(int(response_lengths.max(initial=0)), max_response_length, "response")
        # Every row's tokens are written at once, through boolean masks: filling a mask in
        # row-major order places a concatenation of the rows' lists exactly where they belong.
        in_prompt = np.arange(width_p) >= (width_p - prompt_lengths)[:, None]
        in_response = np.arange(width_r) < response_lengths[:, None]
        prompts = np.full((rows, width_p), pad_token_id, dtype=np.int64)
        prompts[in_prompt] = _flat(np, (t.prompt_ids for t in samples), np.int64)
        responses = np.full((rows, width_r), pad_token_id, dtype=np.int64)
        responses[in_response] = _flat(np, (t.response_ids for t in samples), np.int64)
        response_mask = in_response.astype(np.int64)
        advantage = np.fromiter((t.advantage for t in samples), np.float32, rows)
        advantages = np.where(in_response, advantage[:, None], np.float32(0.0))
        for row, t in enumerate(samples):
            if t.response_mask is not None or t.token_advantages is not None:
                n = len(t.response_ids)
                response_mask[row, :n] = t.mask()
                advantages[row, :n] = t.per_token_advantages()
        has_logprobs = np.fromiter((t.response_logprobs is not None for t in samples), bool, rows)
        old_logprobs = np.zeros((rows, width_r), dtype=np.float32)
        old_logprobs[in_response & has_logprobs[:, None]] = _flat(
            np,
            (t.response_logprobs for t in samples if t.response_logprobs is not None),
            np.float32,
        )
        rewards = np.fromiter((t.reward for t in samples), np.float32, rows)
        token_rewards = np.zeros((rows, width_r), dtype=np.float32)
        nonempty = response_lengths > 0
        token_rewards[nonempty, response_lengths[nonempty] - 1] = rewards[nonempty]
        attention = np.empty((rows, width_p + width_r), dtype=np.int64)
        attention[:, :width_p] = in_prompt
        attention[:, width_p:] = in_response
        positions = np.cumsum(attention, axis=1)
        positions -= 1
        np.maximum(positions, 0, out=positions)
        return {
            "prompts": prompts,
            "responses": responses,
            "input_ids": np.concatenate([prompts, responses], axis=1),
            "attention_mask": attention,
            "position_ids": positions,
            "response_mask": response_mask,
            "old_logprobs": old_logprobs,
            "has_logprobs": has_logprobs,
            "advantages": advantages,
            "token_rewards": token_rewards,
            "rewards": rewards,
            "weights": np.fromiter((t.weight for t in samples), np.float32, rows),
        }

    def to_tensors(self, **options: Any) -> dict[str, Any]:
        """:meth:`to_arrays` as torch tensors (needs torch); same keys and options."""
        try:
            import torch
        except ImportError as exc:
            raise AglError(
                "TransitionBatch.to_tensors needs torch (install agl-torch or torch)"
            ) from exc
        return {key: torch.from_numpy(value) for key, value in self.to_arrays(**options).items()}

    # --- files ------------------------------------------------------------------------------

    def to_records(self) -> list[dict[str, Any]]:
        """Each transition as a plain dict (JSON-ready)."""
        return [asdict(t) for t in self.transitions]

    def to_jsonl(self, path: str | os.PathLike[str]) -> Path:
        """Write one JSON object per transition; returns the path."""
        target = Path(path)
        with target.open("w", encoding="utf-8") as handle:
            for record in self.to_records():
                handle.write(json.dumps(record, separators=(",", ":")) + "\n")
        return target

    def to_parquet(self, path: str | os.PathLike[str]) -> Path:
        """Write the transitions as a Parquet table (needs pyarrow); returns the path."""
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise AglError("to_parquet needs pyarrow: pip install 'agl-core[parquet]'") from exc
        target = Path(path)
        pq.write_table(pa.Table.from_pylist(self.to_records(), schema=_arrow_schema(pa)), target)
        return target

    @classmethod
    def from_records(cls, records: Sequence[Mapping[str, Any]]) -> TransitionBatch:
        """Rebuild a batch from :meth:`to_records` output; unknown keys are an error."""
        names = {f.name for f in fields(Transition)}
        transitions = []
        for index, record in enumerate(records):
            unknown = set(record) - names
            if unknown:
                raise InvalidInputError(
                    f"transition {index} has unknown fields {sorted(unknown)}", field="records"
                )
            try:
                transitions.append(Transition(**record))
            except TypeError as exc:
                raise InvalidInputError(f"transition {index}: {exc}", field="records") from exc
        return cls(transitions)

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str]) -> TransitionBatch:
        """Read a batch written by :meth:`to_jsonl`."""
        records = []
        with Path(path).open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except ValueError as exc:
                    raise InvalidInputError(f"{path}:{number}: not JSON ({exc})") from exc
        return cls.from_records(records)

    @classmethod
    def from_parquet(cls, path: str | os.PathLike[str]) -> TransitionBatch:
        """Read a batch written by :meth:`to_parquet` (needs pyarrow)."""
        import pyarrow.parquet as pq

        return cls.from_records(pq.read_table(Path(path)).to_pylist())


def _flat(np: Any, lists: Iterator[list[Any]] | Any, dtype: Any) -> Any:
    """One array of the concatenated lists."""
    return np.fromiter(itertools.chain.from_iterable(lists), dtype)


def _width(longest: int, limit: int | None, what: str) -> int:
    if limit is None:
        return longest
    if longest > limit:
        raise InvalidInputError(
            f"a {what} has {longest} tokens, more than max_{what}_length={limit}",
            field=f"max_{what}_length",
        )
    return limit


def _arrow_schema(pa: Any) -> Any:
    return pa.schema(
        [
            ("agent", pa.string()),
            ("prompt_ids", pa.list_(pa.int64())),
            ("response_ids", pa.list_(pa.int64())),
            ("response_logprobs", pa.list_(pa.float64())),
            ("reward", pa.float64()),
            ("advantage", pa.float64()),
            ("rollout_id", pa.string()),
            ("group_id", pa.string()),
            ("step", pa.int64()),
            ("attempt_id", pa.string()),
            ("call_index", pa.int64()),
            ("n_calls", pa.int64()),
            ("response_mask", pa.list_(pa.int64())),
            ("token_advantages", pa.list_(pa.float64())),
            ("weight", pa.float64()),
        ]
    )
