"""What a span sender's buffer holds in memory when it is full (issue: a full disk drops spans).

While the store cannot take spans, a sender keeps them up to a bound in encoded bytes
(``max_buffer_bytes``, 64 MiB by default: :mod:`agl.tracing._kept`). This fills a
:class:`~agl.tracing._kept.KeptSpans` to ``--mb`` MiB with spans of three shapes and prints the
Python memory it holds (``tracemalloc``) against the bound:

- **small**: an agent's tool span, a few short attributes;
- **chat**: an instrumented chat call, its messages as JSON text (~4 KB);
- **gateway**: a gateway span, request and response JSON (~20 KB) and 1,000 token ids and
  logprobs, as lists.

It checks that the bound holds (the kept spans' encoded size never exceeds it, and the newest
span is always kept).

Run: ``uv run --no-sync python benchmarks/span_buffer.py`` (``--mb 8`` for a quick run).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import tracemalloc
from collections.abc import Callable

from agl import Span
from agl.tracing._kept import KeptSpans


def small(index: int) -> Span:
    return Span.create(
        rollout_id="ro-1",
        attempt_id="at-1",
        name="tool.search",
        attributes={
            "tool.name": "search",
            "input": f"query {index}",
            "output": f"{index}" + "x" * 120,
        },
    )


def chat(index: int) -> Span:
    messages = [{"role": "user", "content": f"question {index} " + "y" * 1800}]
    answer = f"answer {index} " + "z" * 1800
    return Span.create(
        rollout_id="ro-1",
        attempt_id="at-1",
        name="openai.chat",
        attributes={
            "gen_ai.input.messages": json.dumps(messages),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": answer}]),
            "gen_ai.request.model": "policy",
        },
    )


def gateway(index: int) -> Span:
    rng = random.Random(index)
    ids = [rng.randrange(50_000) for _ in range(1000)]
    return Span.create(
        rollout_id="ro-1",
        attempt_id="at-1",
        name="agl.gateway.chat",
        attributes={
            "agl.llm.request_json": json.dumps(
                {"messages": [{"content": f"{index}" + "q" * 9000}]}
            ),
            "agl.llm.response_json": json.dumps(
                {"choices": [{"content": f"{index}" + "a" * 9000}]}
            ),
            "agl.llm.prompt_token_ids": ids[:500],
            "agl.llm.response_token_ids": ids[500:],
            "agl.llm.response_logprobs": [-rng.random() for _ in range(500)],
        },
    )


def measure(name: str, make: Callable[[int], Span], bound: int) -> None:
    probe = KeptSpans(bound, max_count=1)
    probe.add([make(0)])
    size = probe.bytes  # one span, encoded as the sender measures it
    gc.collect()
    tracemalloc.start()
    kept = KeptSpans(bound, max_count=10**9)
    base = tracemalloc.get_traced_memory()[0]
    total = 2 * bound // size + 1  # past the bound: the second half pushes out the first
    last = None
    for index in range(total):
        last = make(index)  # each span built afresh, as a sender receives them
        kept.add([last])
        assert kept.bytes <= bound, (kept.bytes, bound)
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert kept.oldest(len(kept))[-1] is last, "the newest span was not kept"
    print(
        f"{name:8} {len(kept):>7,} spans kept of {total:>7,}  encoded {kept.bytes / 2**20:6.1f} MiB"
        f"  held in memory {held / 2**20:7.1f} MiB  ({held / max(kept.bytes, 1):4.1f} x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=64.0, help="the bound, in MiB (default 64)")
    args = parser.parse_args()
    bound = int(args.mb * 2**20)
    print(f"a span buffer bounded at {args.mb:g} MiB of encoded spans, filled past it:")
    for name, make in (("small", small), ("chat", chat), ("gateway", gateway)):
        measure(name, make, bound)


if __name__ == "__main__":
    main()
