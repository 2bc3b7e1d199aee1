"""agl-torch's generation engine beside ``transformers.generate``: one full batch, tokens/s.

Both sides run the same model object on the same ``--batch`` prompts (lengths spread over
``--prompt`` - 7 .. ``--prompt`` tokens, so the batch is left-padded), greedily, for
``--new-tokens`` tokens with the same stopping (the model's EOS, which random weights rarely
sample; a row's tokens are counted up to and including its EOS on both sides). The engine gets
all requests at once and runs them as one batch; ``model.generate`` gets them as one
left-padded batch. The sides alternate, ``--repeat`` rounds each after one warm-up each; rows
show the median tokens/s, the engine/transformers ratio and how many rows generated the same
tokens on both sides (greedy: all of them, up to float rounding ties). Beside tokens/s (wall
time), each side's tokens per CPU-second of this process: on a shared machine wall time
swings with the load, CPU time much less, as long as torch's threads do not spin waiting for
cores they do not get (``--threads 1`` there).

Two models of the quickstart's family (Llama, ~400-token BPE vocabulary, random weights, built
in code): the quickstart's own (2 layers, 64 wide) and ``--large`` (24 layers, 1024 wide,
403M parameters) with the smaller ``--large-*`` counts, so it finishes in minutes on 2 cores.

Run: ``uv run --no-sync python benchmarks/generate.py`` (``--device cuda`` on a GPU;
``--sizes tiny`` for the small model only). Prints figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from torch_loop import _model, _prompt_ids, _synchronize


def _prompts(tokenizer: Any, batch: int, length: int) -> list[list[int]]:
    return [_prompt_ids(tokenizer, length - salt % 8, salt) for salt in range(batch)]


def _until_eos(tokens: list[int], eos: frozenset[int]) -> list[int]:
    for index, token in enumerate(tokens):
        if token in eos:
            return tokens[: index + 1]
    return tokens


def run_engine(engine: Any, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    from agl_torch.engine import SamplingParams

    params = SamplingParams(max_tokens=new_tokens, temperature=0)

    async def all_at_once() -> list[list[int]]:
        done = await asyncio.gather(*(engine.generate(p, params) for p in prompts))
        return [c.token_ids for c in done]

    return asyncio.run(all_at_once())


def run_transformers(
    model: Any, prompts: list[list[int]], new_tokens: int, pad: int, eos: frozenset[int]
) -> list[list[int]]:
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask.to(model.device),
            do_sample=False,
            max_new_tokens=new_tokens,
            pad_token_id=pad,
            eos_token_id=sorted(eos),
        )
    return [_until_eos(row, eos) for row in out[:, width:].tolist()]


def compare(
    path: Path, device: str, batch: int, prompt: int, new_tokens: int, repeat: int
) -> dict[str, float]:
    """Median tokens/s of the engine and of ``model.generate``, alternating, on one model."""
    from agl_torch.engine import GenerationEngine
    from agl_torch.policy import load_policy

    model, tokenizer = load_policy(path, device=device)
    prompts = _prompts(tokenizer, batch, prompt)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rates: dict[str, list[float]] = {"agl engine": [], "transformers generate": []}
    cpu_rates: dict[str, list[float]] = {name: [] for name in rates}
    outputs: dict[str, list[list[int]]] = {}
    with GenerationEngine(model, tokenizer, device=device, max_batch_size=batch) as engine:
        eos = engine.eos_token_ids
        sides = {
            "agl engine": lambda: run_engine(engine, prompts, new_tokens),
            "transformers generate": lambda: run_transformers(model, prompts, new_tokens, pad, eos),
        }
        for name, side in sides.items():
            outputs[name] = side()  # warm-up
        for round_ in range(repeat):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for name in order:
                _synchronize(device)
                started, cpu_started = time.perf_counter(), time.process_time()
                outputs[name] = sides[name]()
                _synchronize(device)
                tokens = sum(len(t) for t in outputs[name])
                rates[name].append(tokens / (time.perf_counter() - started))
                cpu_rates[name].append(tokens / (time.process_time() - cpu_started))
    figures = {name: statistics.median(values) for name, values in rates.items()}
    figures.update({f"{n} (CPU)": statistics.median(v) for n, v in cpu_rates.items()})
    figures["ratio"] = figures["agl engine"] / figures["transformers generate"]
    same = sum(a == b for a, b in zip(*outputs.values(), strict=True))
    figures["rows with the same tokens"] = float(same)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", default="tiny,large", help="comma-separated: tiny, large")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=24, help="longest prompt (tokens)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--large-prompt", type=int, default=16)
    parser.add_argument("--large-new-tokens", type=int, default=16)
    parser.add_argument("--large-repeat", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch's CPU threads (0: its own)")
    args = parser.parse_args()
    import torch

    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = {
        "tiny": (2, 64, args.prompt, args.new_tokens, args.repeat),
        "large": (24, 1024, args.large_prompt, args.large_new_tokens, args.large_repeat),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            layers, width, prompt, new_tokens, repeat = shapes[size]
            path = _model(Path(tmp) / size, layers, width)
            figures = compare(path, args.device, args.batch, prompt, new_tokens, repeat)
            print(
                f"{size} ({layers} x {width}), batch {args.batch}, prompts <= {prompt} tokens, "
                f"{new_tokens} new, greedy, median of {repeat}:"
            )
            for name in ("agl engine", "transformers generate"):
                print(
                    f"  {name:<24} {figures[name]:>10,.0f} tokens/s"
                    f"  {figures[f'{name} (CPU)']:>10,.0f} tokens/CPU-s"
                )
            cpu_ratio = figures["agl engine (CPU)"] / figures["transformers generate (CPU)"]
            print(
                f"  {'ratio (agl / transformers)':<24} {figures['ratio']:>10.2f}"
                f"  {cpu_ratio:>10.2f} (CPU)"
            )
            same = int(figures["rows with the same tokens"])
            print(f"  rows with the same tokens: {same} / {args.batch}")


if __name__ == "__main__":
    main()
