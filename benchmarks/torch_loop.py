"""agl-torch: generation and training tokens/s, and where a quickstart step's time goes.

Runs on ``--device`` (CUDA when present, else the CPU). The model is the quickstart's (a
2-layer, 64-wide Llama, BPE vocabulary of ~400, built in code), or a larger one of the same
family with ``--layers`` / ``--width`` (for example ``--layers 24 --width 1024`` on a GPU).

Timed, in this process:
- **generation**, the policy engine alone (:class:`agl_torch.engine.GenerationEngine`), one
  request at a time and ``--batch`` concurrent requests, each generating ``--new-tokens``
  tokens (random weights rarely stop early; finished rows are counted as generated);
- **the baseline**: plain ``transformers`` ``model.generate`` on the same model and prompts,
  sampling the same way (temperature 1, no top-k), one prompt at a time and all ``--batch``
  prompts as one left-padded batch;
- **generation over HTTP**: the same ``--batch`` concurrent chat requests through the policy
  server with the ``openai`` client (token ids and logprobs on, as the gateway asks);
- **training**: :meth:`agl_torch.learner.Learner.rl_step` on ``--batch`` transitions of
  ``--prompt`` + ``--new-tokens`` tokens, and ``sft_step`` on the same sequences trained on
  their responses (prompt and response tokens per second; median of ``--repeat`` steps after
  one warm-up step); each beside the baseline that computes the vocabulary logits at every
  position instead of only where a token is trained;
- **a quickstart run** of ``--steps`` RL steps (runner, gateway, policy server, SQLite store,
  LightningRL, update, weight swap): the share of a step spent in rollouts, the update, the
  weight swap, and the rest (reading traces, building transitions, logging).

Prints figures only. Run: ``uv run --no-sync python benchmarks/torch_loop.py`` (see
``benchmarks/README.md`` for the GPU runs).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock


def _model(directory: Path, layers: int, width: int) -> Path:
    from agl_torch.quickstart import CALCULATOR_TOOL, demonstrations, tasks
    from agl_torch.tiny import build_tiny_model, build_tokenizer

    demos = demonstrations(tasks(200, seed=3), tool_share=0.5, seed=0)
    rendering = build_tokenizer()
    corpus = [
        rendering.apply_chat_template(d, tools=[CALCULATOR_TOOL], tokenize=False) for d in demos
    ]
    return build_tiny_model(
        directory / "model",
        corpus=corpus,
        vocab_size=400,
        hidden_size=width,
        num_layers=layers,
        num_heads=max(4, width // 64),
        seed=0,
    )


def _synchronize(device: str) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _prompt_ids(tokenizer: Any, length: int, salt: int) -> list[int]:
    text = " ".join(f"What is {salt % 7 + 2}*{i % 9 + 1}?" for i in range(length))
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids[:length]


def bench_engine(
    path: Path, device: str, batch: int, new_tokens: int, prompt: int
) -> dict[str, float]:
    from agl_torch.engine import GenerationEngine, SamplingParams
    from agl_torch.policy import load_policy

    model, tokenizer = load_policy(path, device=device)
    params = SamplingParams(max_tokens=new_tokens, temperature=1.0, seed=0)
    prompts = [_prompt_ids(tokenizer, prompt, salt) for salt in range(batch)]
    figures = {}
    with GenerationEngine(model, tokenizer, device=device, max_batch_size=batch) as engine:
        engine.generate_sync(prompts[0], params)  # warm-up
        started = time.perf_counter()
        tokens = sum(len(engine.generate_sync(p, params).token_ids) for p in prompts[:8])
        figures["engine, batch 1"] = tokens / (time.perf_counter() - started)

        async def many() -> int:
            done = await asyncio.gather(*(engine.generate(p, params) for p in prompts))
            return sum(len(c.token_ids) for c in done)

        started = time.perf_counter()
        tokens = asyncio.run(many())
        figures[f"engine, {batch} concurrent"] = tokens / (time.perf_counter() - started)
        figures["engine, largest batch"] = float(engine.stats.largest_batch)
    return figures


def bench_transformers(
    path: Path, device: str, batch: int, new_tokens: int, prompt: int
) -> dict[str, float]:
    """The baseline: ``model.generate``, one prompt at a time and one padded batch."""
    import torch

    from agl_torch.policy import load_policy

    model, tokenizer = load_policy(path, device=device)
    model.eval()
    prompts = [_prompt_ids(tokenizer, prompt, salt) for salt in range(batch)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    settings = {
        "do_sample": True,
        "temperature": 1.0,
        "top_k": 0,
        "top_p": 1.0,
        "max_new_tokens": new_tokens,
        "pad_token_id": pad,
    }

    def generate(rows: list[list[int]]) -> int:
        width = max(len(r) for r in rows)
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, **settings)
        new = out[:, width:]
        eos = tokenizer.eos_token_id
        # tokens up to and including each row's first end-of-sequence token
        counts = [(row.tolist().index(eos) + 1) if eos in row.tolist() else len(row) for row in new]
        return sum(counts)

    torch.manual_seed(0)
    generate(prompts[:1])  # warm-up
    _synchronize(device)
    started = time.perf_counter()
    tokens = sum(generate([p]) for p in prompts[:8])
    _synchronize(device)
    figures = {"transformers generate, batch 1": tokens / (time.perf_counter() - started)}
    started = time.perf_counter()
    tokens = generate(prompts)
    _synchronize(device)
    figures[f"transformers generate, batch {batch}"] = tokens / (time.perf_counter() - started)
    return figures


def bench_http(path: Path, device: str, batch: int, new_tokens: int) -> dict[str, float]:
    from openai import AsyncOpenAI

    from agl_torch.server import PolicyServer

    async def run(url: str) -> int:
        async with AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as client:

            async def one(index: int) -> int:
                reply = await client.chat.completions.create(
                    model="policy",
                    messages=[
                        {"role": "user", "content": f"What is {index % 7 + 2}*{index % 9 + 1}?"}
                    ],
                    max_tokens=new_tokens,
                    logprobs=True,
                    extra_body={"return_token_ids": True},
                )
                return len(reply.choices[0].token_ids)  # type: ignore[attr-defined]

            await one(0)
            started = time.perf_counter()
            tokens = sum(await asyncio.gather(*(one(i) for i in range(batch))))
            return int(tokens / (time.perf_counter() - started))

    with PolicyServer(path, device=device, max_batch_size=batch) as server:
        return {f"HTTP chat, {batch} concurrent": float(asyncio.run(run(server.url)))}


def bench_training(
    path: Path, device: str, batch: int, prompt: int, new_tokens: int, repeat: int
) -> dict[str, float]:
    import torch

    from agl.lightning import Transition
    from agl_torch.data import SFTExample
    from agl_torch.learner import Learner
    from agl_torch.policy import load_policy, token_logprobs
    from agl_torch.settings import LearnerSettings

    model, tokenizer = load_policy(path, device=device)
    learner = Learner(model, tokenizer, LearnerSettings(lr=1e-4), device=device)
    generator = torch.Generator().manual_seed(0)
    transitions = []
    for index in range(batch):
        prompt_ids = _prompt_ids(tokenizer, prompt, index)
        response = torch.randint(3, len(tokenizer), (new_tokens,), generator=generator).tolist()
        ids = torch.tensor([prompt_ids + response], device=device)
        logprobs = token_logprobs(model, ids, torch.ones_like(ids))[0, len(prompt_ids) :]
        transitions.append(
            Transition(
                "agent",
                prompt_ids,
                response,
                logprobs.tolist(),
                reward=float(index % 2),
                advantage=1.0 if index % 2 else -1.0,
                rollout_id=f"r{index}",
                group_id=f"g{index // 8}",
            )
        )
    examples = [SFTExample(t.prompt_ids + t.response_ids, _response_mask(t)) for t in transitions]
    shape = f"{batch} x {prompt + new_tokens} tokens"
    figures = {}
    for how, everywhere in (("logits where trained", False), ("logits everywhere", True)):
        # the baseline: the output layer at every position, as before agl-torch kept only
        # the positions some row trains on
        with mock.patch("agl_torch.policy._keeps_logits", return_value=not everywhere):
            learner.rl_step(transitions)  # warm-up
            rates = [learner.rl_step(transitions)["tokens/s"] for _ in range(repeat)]
            figures[f"rl_step, {shape}, {how}"] = statistics.median(rates)
            rates = [learner.sft_step(examples)["tokens/s"] for _ in range(repeat)]
            figures[f"sft_step, {shape}, {how}"] = statistics.median(rates)
    return figures


def _response_mask(transition: Any) -> list[int]:
    return [0] * len(transition.prompt_ids) + [1] * len(transition.response_ids)


def bench_loop(directory: Path, device: str, steps: int) -> dict[str, float]:
    from agl import read_metrics
    from agl_torch.quickstart import run

    run(directory / "loop", steps=steps, warmup_epochs=60, device=device, progress=False)
    rows = [row for row in read_metrics(directory / "loop") if "time/step_s" in row][1:]
    total = sum(row["time/step_s"] for row in rows)
    rollout = sum(row["time/rollout_s"] for row in rows)
    update = sum(row.get("actor/time/update_s", 0.0) for row in rows)
    sync = sum(row.get("time/sync_s", 0.0) + row.get("time/checkpoint_s", 0.0) for row in rows)
    return {
        "step time (s, mean)": total / len(rows),
        "rollouts (% of step)": 100 * rollout / total,
        "update (% of step)": 100 * update / total,
        "weight swap + checkpoint (% of step)": 100 * sync / total,
        "traces -> transitions, logging (% of step)": 100
        * (total - rollout - update - sync)
        / total,
        "rollouts/s during rollouts": 64 * len(rows) / rollout,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prompt", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--device", default=None, help="default: CUDA when present, else CPU")
    parser.add_argument("--layers", type=int, default=2, help="the model's layers (default 2)")
    parser.add_argument("--width", type=int, default=64, help="the model's width (default 64)")
    parser.add_argument(
        "--steps", type=int, default=8, help="quickstart steps, the first not counted (0: skip)"
    )
    args = parser.parse_args()
    if args.steps == 1 or args.steps < 0:
        parser.error("--steps must be 0 (skip the run) or at least 2 (the first step warms up)")
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    where = (
        torch.cuda.get_device_name(device)
        if torch.device(device).type == "cuda"
        else f"CPU, {torch.get_num_threads()} threads"
    )
    print(f"torch {torch.__version__}, {where}")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        path = _model(directory, args.layers, args.width)
        size = sum(p.numel() for p in _load(path).parameters())
        print(f"model: {args.layers} layers x {args.width} wide, {size / 1e6:.1f}M parameters")
        figures: dict[str, float] = {}
        figures.update(bench_engine(path, device, args.batch, args.new_tokens, args.prompt))
        figures.update(bench_transformers(path, device, args.batch, args.new_tokens, args.prompt))
        figures.update(bench_http(path, device, args.batch, args.new_tokens))
        figures.update(
            bench_training(path, device, args.batch, args.prompt, args.new_tokens, args.repeat)
        )
        for name, value in figures.items():
            unit = "" if "largest" in name else " tokens/s"
            print(f"{name:<58} {value:>10,.0f}{unit}")
        if args.steps:
            for name, value in bench_loop(directory, device, args.steps).items():
                print(f"quickstart: {name:<42} {value:>8.2f}")


def _load(path: Path) -> Any:
    from agl_torch.policy import load_policy

    return load_policy(path, device="cpu", quiet=True)[0]


if __name__ == "__main__":
    main()
