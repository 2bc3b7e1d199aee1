"""Spans -> transitions throughput: LightningRL on R rollouts x C calls, on one core.

Each rollout's spans are what a traced agent leaves in the store: the runner's root span, an
agent span, per call an instrumented ``llm`` span (GenAI attributes, response id) and the
gateway's span (prompt and response token ids, logprobs, request/response JSON), a step reward
after every other call and the final reward. Half the tasks' groups have reward variance.
The spans are built (as pydantic ``Span`` objects, the form stores return) before the clock
starts; token-id lists are shared between rollouts to keep memory small, which changes nothing
in what is timed (samples never copy them; both modes compare each prompt with the previous
call's prompt + response, which is how re-rendered histories are found).

Timed, median of ``--repeat`` runs, in this process (one core):
- ``TransitionBuilder().build`` (join, tree repair, attribution, credit, GRPO, samples);
- the same with ``credit="discounted"`` and ``trajectory=True`` (prompts extend each other);
- ``TransitionBatch.to_arrays`` on the per-call batch (padded numpy arrays).

Target: >= 50,000 calls/s for the first row. Prints figures only.
Run: ``uv run --no-sync python benchmarks/lightning.py [--rollouts 10000 --calls 8]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from agl import Attempt, AttemptStatus, Rollout, RolloutStatus, Span, semconv
from agl._results import RolloutResult, summarize
from agl._spans import new_span_id, new_trace_id
from agl.lightning import TransitionBuilder

TARGET = 50_000


def token_lists(calls: int, prompt: int, response: int) -> list[tuple[list[int], list[int]]]:
    """Per call position: a prompt that extends the previous prompt + response + observation."""
    rng = random.Random(7)
    lists = []
    history = [rng.randrange(3, 50_000) for _ in range(prompt)]
    for _ in range(calls):
        reply = [rng.randrange(3, 50_000) for _ in range(response)]
        lists.append((list(history), reply))
        history = history + reply + [rng.randrange(3, 50_000) for _ in range(20)]
    return lists


def rollout_spans(
    index: int, calls: int, tokens: list[tuple[list[int], list[int]]], sample: int
) -> RolloutResult:
    rollout_id, attempt_id = f"ro-{index:08d}", f"at-{index:08d}"
    trace = new_trace_id()
    t = 1_000_000_000
    spans: list[Span] = []

    def add(name: str, start: int, end: int, parent: str | None, attrs: dict[str, Any]) -> str:
        span_id = new_span_id()
        spans.append(
            Span(
                rollout_id=rollout_id,
                attempt_id=attempt_id,
                sequence_id=len(spans) + 1,
                trace_id=trace if not name.startswith("agl.gateway") else new_trace_id(),
                span_id=span_id,
                parent_id=parent,
                name=name,
                start_time_unix_nano=start,
                end_time_unix_nano=end,
                attributes=attrs,
            )
        )
        return span_id

    end = t + (calls + 2) * 1000
    root = add("rollout", t, end, None, {semconv.AGL_SPAN_TYPE: "rollout"})
    agent = add(
        "agent solver",
        t + 1,
        end - 1,
        root,
        {semconv.AGL_SPAN_TYPE: "agent", semconv.AGL_AGENT_NAME: "solver"},
    )
    for call in range(calls):
        start = t + 10 + call * 1000
        response_id = f"chatcmpl-{index}-{call}"
        prompt, reply = tokens[call]
        add(
            "agl.gateway.chat",
            start + 5,
            start + 800,
            None,
            {
                semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_GATEWAY,
                semconv.GEN_AI_OPERATION_NAME: "chat",
                semconv.GEN_AI_RESPONSE_ID: response_id,
                semconv.AGL_PROMPT_TOKEN_IDS: prompt,
                semconv.AGL_RESPONSE_TOKEN_IDS: reply,
                semconv.AGL_RESPONSE_LOGPROBS: [-0.5] * len(reply),
                semconv.AGL_REQUEST_JSON: '{"model": "policy", "messages": []}',
                semconv.AGL_RESPONSE_JSON: '{"id": "' + response_id + '"}',
            },
        )
        add(
            "openai.chat",
            start,
            start + 900,
            agent,
            {
                semconv.AGL_SPAN_TYPE: "llm",
                semconv.GEN_AI_OPERATION_NAME: "chat",
                semconv.GEN_AI_PROVIDER_NAME: "openai",
                semconv.GEN_AI_RESPONSE_ID: response_id,
                semconv.GEN_AI_USAGE_INPUT_TOKENS: len(prompt),
                semconv.GEN_AI_USAGE_OUTPUT_TOKENS: len(reply),
            },
        )
        if call % 2:
            add(
                "agl.reward",
                start + 950,
                start + 950,
                agent,
                {semconv.AGL_SPAN_TYPE: "reward", semconv.AGL_REWARD: 0.1},
            )
    group = index // 4
    final = float(sample % 2) if group % 2 else 0.5
    add(
        "agl.reward",
        end - 2,
        end - 2,
        agent,
        {semconv.AGL_SPAN_TYPE: "reward", semconv.AGL_REWARD: final},
    )
    rollout = Rollout(
        rollout_id=rollout_id,
        input={"task": group},
        metadata={"task_index": group, "sample": sample},
        status=RolloutStatus.SUCCEEDED,
        enqueue_time=0.0,
        latest_attempt_id=attempt_id,
        num_attempts=1,
    )
    attempt = Attempt(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence=1,
        status=AttemptStatus.SUCCEEDED,
        start_time=0.0,
    )
    return summarize(rollout, [attempt], spans)


def timed(
    label: str, fn: Callable[[], Any], calls: int, repeat: int, unit: str = "calls/s"
) -> tuple[float, Any]:
    seconds = []
    result = None
    for _ in range(repeat):
        gc.collect()
        started = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - started)
    median = statistics.median(seconds)
    print(f"  {label:<46} {median * 1e3:9.1f} ms  {calls / median:>11,.0f} {unit}")
    return calls / median, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--response-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    tokens = token_lists(args.calls, args.prompt_tokens, args.response_tokens)
    print(f"building {args.rollouts:,} rollouts x {args.calls} calls of spans ...", flush=True)
    results = [rollout_spans(i, args.calls, tokens, i % 4) for i in range(args.rollouts)]
    total_calls = args.rollouts * args.calls
    spans = sum(len(r.spans) for r in results)
    print(f"{spans:,} spans; {total_calls:,} calls; timing (median of {args.repeat}):")

    figures: dict[str, float] = {}
    per_call = TransitionBuilder()
    figures["build"], batch = timed(
        "build: final reward, GRPO, one sample per call",
        lambda: per_call.build(results),
        total_calls,
        args.repeat,
    )
    # Groups of 4; the odd ones (with at least 2 samples) have reward variance, the rest drop.
    kept = [
        i for i in range(args.rollouts) if (i // 4) % 2 and min(4, args.rollouts - i // 4 * 4) > 1
    ]
    expected = len(kept) * args.calls
    dropped = batch.report.dropped_calls.get("zero_variance_group", 0)
    if len(batch) != expected or dropped != total_calls - expected:
        raise SystemExit(f"wrong batch: {batch!r}, expected {expected} samples")
    discounted = TransitionBuilder(credit="discounted", trajectory=True)
    figures["trajectory"], merged = timed(
        "build: discounted, trajectory mode (merged)",
        lambda: discounted.build(results),
        total_calls,
        args.repeat,
    )
    if len(merged) != len(kept) or merged.report.notes["trajectory_breaks"]:
        raise SystemExit(f"trajectory mode did not merge every rollout: {merged!r}")
    figures["to_arrays"], _ = timed(
        f"to_arrays ({len(batch):,} samples, padded numpy)",
        batch.to_arrays,
        len(batch),
        args.repeat,
        unit="samples/s",
    )
    verdict = "met" if figures["build"] >= TARGET else "NOT met"
    print(f"target >= {TARGET:,} calls/s (build): {verdict}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(figures, handle, indent=2)


if __name__ == "__main__":
    main()
