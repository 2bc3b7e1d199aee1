"""One rollout's credited calls as training samples: one per call, or merged trajectories.

Each call of an agent is compared with that agent's previous call in the rollout (the last one
with token ids and a response), in token ids and, when they part, in messages
(:mod:`~agl.lightning._history`):

- the call *extends* it (its prompt ids start with the previous prompt + response ids): in
  trajectory mode the two are merged into one sample, the new prompt tokens (tool results,
  observations) masked out;
- the call starts a *new conversation* (its messages do not continue the previous call's: a
  sub-task, the next question): in trajectory mode it starts a new sample, counted as
  ``trajectory_breaks``;
- the call *re-renders the history* (its messages continue the previous call's conversation,
  its prompt ids do not extend the previous prompt + response: reasoning dropped, a compacted
  history, an edited tool result): counted as ``prefix_mismatch`` with or without trajectory
  mode, since merging would train on ids the model never saw and even alone the call's prompt
  is not what the earlier turns were sampled from. It is never merged into the sample before:
  it starts a sample of its own (later calls that extend it may merge into that one).
  :func:`warn_prefix_mismatch` says so once per batch.

A call whose messages or previous answer were not recorded (the completions wire, a call only
an instrumentation saw) is told by its ids alone: not extending is a ``trajectory_breaks``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from agl.lightning._calls import LLMCall
from agl.lightning._history import first_difference, same_conversation
from agl.lightning._transitions import DropReport, Transition

__all__ = ["rollout_samples", "warn_prefix_mismatch"]

logger = logging.getLogger("agl.lightning")


def rollout_samples(
    calls: Sequence[LLMCall],
    returns: Sequence[float],
    advantages: Sequence[float],
    *,
    group_id: str,
    step: int,
    report: DropReport,
    trajectory: bool,
    max_prompt_length: int | None,
    max_response_length: int | None,
) -> list[Transition]:
    """The samples of one rollout's calls (of the selected agents), each weighted
    ``1 / (samples of its agent in the rollout)``; what is dropped or odd goes to ``report``."""
    by_agent: dict[str | None, list[Transition]] = {}
    previous: dict[str | None, Transition] = {}  # the sample a call may extend, per agent
    before: dict[str | None, LLMCall] = {}  # the call a call is compared with, per agent
    for call, ret, adv in zip(calls, returns, advantages, strict=True):
        prompt, response = call.prompt_ids, call.response_ids
        if prompt is None or response is None:
            report.drop_call(call.rollout_id, call.index, "no_token_ids")
            continue
        if not response:
            report.drop_call(call.rollout_id, call.index, "empty_response")
            continue
        logprobs = call.logprobs
        if logprobs is not None and len(logprobs) != len(response):
            report.notes["logprobs_mismatch"] += 1
            logprobs = None
        last_call = before.get(call.agent)
        before[call.agent] = call
        # The agent's sample, when there is one, ends with ``last_call``'s tokens: comparing
        # with the call tells whether the call extends the sample too.
        position = None if last_call is None else first_difference(last_call, call)
        if position is not None:
            assert last_call is not None
            if same_conversation(last_call, call):
                report.prefix_mismatch(call.rollout_id, call.index, position)
            elif trajectory and call.agent in previous:
                report.notes["trajectory_breaks"] += 1
            previous.pop(call.agent, None)
        last = previous.get(call.agent) if trajectory else None
        if last is not None:
            if _extend(last, call, logprobs, ret, adv, max_response_length):
                continue
            report.notes["trajectory_length_splits"] += 1
        if max_prompt_length is not None and len(prompt) > max_prompt_length:
            report.drop_call(call.rollout_id, call.index, "prompt_too_long")
            previous.pop(call.agent, None)
            continue
        if max_response_length is not None and len(response) > max_response_length:
            report.drop_call(call.rollout_id, call.index, "response_too_long")
            previous.pop(call.agent, None)
            continue
        sample = Transition(
            agent=call.agent,
            prompt_ids=prompt,
            response_ids=response,
            response_logprobs=logprobs,
            reward=ret,
            advantage=adv,
            rollout_id=call.rollout_id,
            group_id=group_id,
            step=step,
            attempt_id=call.attempt_id,
            call_index=call.index,
            weight_version=call.weight_version,
        )
        by_agent.setdefault(call.agent, []).append(sample)
        previous[call.agent] = sample
    out = []
    for samples in by_agent.values():
        weight = 1.0 / len(samples)
        for sample in samples:
            sample.weight = weight
            out.append(sample)
    return out


def warn_prefix_mismatch(report: DropReport) -> None:
    """Log one warning for a batch's re-rendered histories, with one example; none without."""
    found = report.prefix_mismatches
    if not found:
        return
    rollout_id, call_index, position = found[0]
    logger.warning(
        "%d LLM call(s) re-rendered their conversation's history (transitions/prefix_mismatch): "
        "the messages continue the agent's previous call, the prompt token ids do not extend "
        "its prompt + response (e.g. rollout %s, call %d: from token %d on). Each was trained "
        "as a sample of its own, never merged. A chat template that drops earlier reasoning, a "
        "compacted history or an edited tool result does this; render the history as it was "
        "sampled to train the turns as one trajectory.",
        len(found),
        rollout_id,
        call_index,
        position,
    )


def _extend(
    sample: Transition,
    call: LLMCall,
    logprobs: list[float] | None,
    ret: float,
    adv: float,
    max_response: int | None,
) -> bool:
    """Merge a call into the sample its prompt extends; False when the merged response would
    be longer than ``max_response``."""
    prompt, response = call.prompt_ids or [], call.response_ids or []
    seen = len(sample.prompt_ids) + len(sample.response_ids)
    observation = prompt[seen:]
    grown = len(sample.response_ids) + len(observation) + len(response)
    if max_response is not None and grown > max_response:
        return False
    if sample.n_calls == 1:
        # First merge: own the lists (they are the span's until now), then grow them in place.
        sample.response_mask = sample.mask().copy()
        sample.token_advantages = sample.per_token_advantages().copy()
        sample.response_ids = list(sample.response_ids)
        if sample.response_logprobs is not None:
            sample.response_logprobs = list(sample.response_logprobs)
    assert sample.response_mask is not None
    assert sample.token_advantages is not None
    gap = len(observation)
    sample.response_mask += [0] * gap
    sample.response_mask += [1] * len(response)
    sample.token_advantages += [0.0] * gap
    sample.token_advantages += [adv] * len(response)
    if sample.response_logprobs is not None and logprobs is not None:
        sample.response_logprobs += [0.0] * gap
        sample.response_logprobs += logprobs
    else:
        sample.response_logprobs = None
    sample.response_ids += observation
    sample.response_ids += response
    sample.reward = ret
    sample.advantage = adv
    sample.n_calls += 1
    versions = (sample.weight_version, call.weight_version)
    sample.weight_version = None if None in versions else min(v for v in versions if v is not None)
    return True
