"""Batched generation for a transformers causal LM, with versioned weight updates.

:class:`GenerationEngine` serves token-in, token-out generation requests from any thread or
event loop. One background thread owns the model and runs it in *static batches*: it takes the
requests waiting in the queue (up to ``max_batch_size``, once no new one has come for
``batch_wait_s``), left-pads their prompts (attention mask and position ids make padding
invisible, so a batched row computes what it would alone), prefills, then decodes with the KV
cache until every row is done, dropping finished rows from the cache as it goes. Requests that
arrive meanwhile wait for the next batch.

Each row samples with its own :class:`SamplingParams` (greedy at temperature 0, else temperature
and top-p; a ``seed`` gives the row its own random generator, so its output does not depend on
what it is batched with) and stops at an EOS token (the tokenizer's and the generation config's),
a stop string, ``max_tokens`` or the model's maximum length. The logprob reported for each token
is the log-softmax of the raw logits (before temperature and top-p), the distribution a policy
gradient needs; vLLM calls it ``raw_logprobs``.

**Weight versions.** :meth:`GenerationEngine.update_weights` queues new weights and returns once
the engine thread has copied them into the model, which it does between two batches and never
during one. :attr:`GenerationEngine.version` counts the updates (0 for the weights the engine was
built with) and every :class:`Completion` carries the version that produced all of its tokens:
a request submitted after ``update_weights`` returned gets the new weights, and a request that
was already running finishes with the old ones. No request fails because of an update.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import queue
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NoReturn, Self

import torch

from agl.errors import AglError, InvalidInputError

__all__ = [
    "Completion",
    "EngineStats",
    "GenerationEngine",
    "SamplingParams",
    "Token",
    "WeightsLike",
    "load_weights",
]

logger = logging.getLogger("agl_torch.engine")

WeightsLike = Mapping[str, torch.Tensor] | str | os.PathLike[str]
"""New weights: a state dict, or a Hugging Face model folder saved with ``save_pretrained``."""


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples.

    Attributes:
        max_tokens: The most tokens to generate; ``None`` for as many as the model's maximum
            length leaves after the prompt.
        temperature: Softmax temperature; 0 samples greedily (the most likely token).
        top_p: Nucleus sampling: sample among the most likely tokens whose probabilities add up
            to ``top_p``.
        stop: Stop once the generated text contains one of these strings (the tokens that
            completed it are kept, so the text still decodes from the token ids).
        seed: Seeds a random generator of the request's own: the same seed gives the same
            output, whatever the request is batched with.
        top_logprobs: How many of the most likely tokens to report at each step, with their
            logprobs.
    """

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    stop: Sequence[str] = ()
    seed: int | None = None
    top_logprobs: int = 0

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 1:
            _invalid("max_tokens", self.max_tokens, "a positive integer")
        if not self.temperature >= 0:
            _invalid("temperature", self.temperature, "a number >= 0")
        if not 0 < self.top_p <= 1:
            _invalid("top_p", self.top_p, "a number in (0, 1]")
        if self.top_logprobs < 0:
            _invalid("top_logprobs", self.top_logprobs, "an integer >= 0")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            _invalid("stop", self.stop, "a list of non-empty strings")


@dataclass(frozen=True)
class Token:
    """One generated token, as a stream reports it.

    Attributes:
        id: The token id.
        logprob: Its logprob under the model's raw distribution.
        top_logprobs: The ``top_logprobs`` most likely ``(id, logprob)`` at this step, best
            first.
        weight_version: The weights that produced it.
    """

    id: int
    logprob: float
    top_logprobs: list[tuple[int, float]]
    weight_version: int


@dataclass
class Completion:
    """A finished generation.

    Attributes:
        prompt_ids: The prompt, as given.
        token_ids: The generated tokens; a final EOS token is included.
        logprobs: One logprob per generated token (raw distribution, see the module docstring).
        top_logprobs: Per generated token, the most likely ``(id, logprob)``, best first.
        finish_reason: ``"stop"`` (EOS or a stop string) or ``"length"`` (``max_tokens`` or the
            model's maximum length).
        weight_version: The weights that produced every token.
        stop_reason: The stop string that ended the generation, if one did.
    """

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    finish_reason: Literal["stop", "length"]
    weight_version: int
    stop_reason: str | None = None


@dataclass(frozen=True)
class EngineStats:
    """What an engine has done since it was built.

    Attributes:
        batches: Batches run.
        requests: Requests completed.
        largest_batch: The most requests one batch held.
        tokens: Tokens generated.
    """

    batches: int = 0
    requests: int = 0
    largest_batch: int = 0
    tokens: int = 0


_Event = Token | Completion | BaseException
_MAX_WAITS = 10
"""A batch waits at most this many ``batch_wait_s`` for a burst of requests to end."""


@dataclass(eq=False)
class _Request:
    """A request in the queue or in a batch; its output grows as the batch decodes."""

    prompt_ids: list[int]
    params: SamplingParams
    limit: int
    emit: Callable[[_Event], None]
    stream: bool
    cancelled: bool = False
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)


@dataclass(eq=False)
class _Update:
    state: dict[str, torch.Tensor]
    done: concurrent.futures.Future[int] = field(default_factory=concurrent.futures.Future)


class GenerationEngine:
    """Serve generation requests for ``model`` from a background thread, in batches.

    Example::

        engine = GenerationEngine(model, tokenizer)
        with engine:
            done = await engine.generate(prompt_ids, SamplingParams(max_tokens=64, seed=1))
            version = engine.update_weights(trainer_model.state_dict())

    The engine owns ``model`` while it runs: change its weights only through
    :meth:`update_weights`.

    Args:
        model: A transformers causal LM (put in eval mode here).
        tokenizer: Its tokenizer: gives the EOS token and decodes text for stop strings.
        device: Where to run; the model's own device when ``None``.
        max_batch_size: The most requests one batch takes.
        batch_wait_s: How long a batch waits for one more request before it starts. The wait
            restarts with each arrival (up to 10 x ``batch_wait_s`` in all), so a burst of
            requests, such as HTTP requests parsed one after another, lands in one batch.
        max_model_len: The longest prompt + generation; ``max_position_embeddings`` by default.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        device: str | torch.device | None = None,
        max_batch_size: int = 64,
        batch_wait_s: float = 0.002,
        max_model_len: int | None = None,
    ) -> None:
        if max_batch_size < 1:
            _invalid("max_batch_size", max_batch_size, "a positive integer")
        self.device = torch.device(device) if device is not None else model.device
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        config_len = getattr(model.config, "max_position_embeddings", None)
        length = max_model_len or config_len
        if not isinstance(length, int) or length < 2:
            _invalid("max_model_len", length, "an integer >= 2 (the model's config has none)")
        self.max_model_len: int = length
        """The longest prompt + generation a request may have."""
        self.vocab_size: int = model.get_input_embeddings().num_embeddings
        self.eos_token_ids: frozenset[int] = _eos_ids(model, tokenizer)
        """Token ids that end a generation."""
        self._version = 0
        self._stats = EngineStats()
        self._rng = torch.Generator(self.device)
        self._rng.seed()
        self._cond = threading.Condition()
        self._waiting: list[_Request] = []
        self._updates: list[_Update] = []
        self._running = False
        self._thread: threading.Thread | None = None
        self._model_lock = threading.Lock()

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the engine thread (once; starting a running engine does nothing)."""
        with self._cond:
            if self._running:
                return self
            self._running = True
        self._thread = threading.Thread(target=self._loop, name="agl-engine", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Finish the running batch, fail the requests still queued, stop the thread."""
        with self._cond:
            self._running = False
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def version(self) -> int:
        """The version of the weights now in the model: 0, then one more per update."""
        return self._version

    @property
    def stats(self) -> EngineStats:
        """A snapshot of what the engine has done."""
        return self._stats

    # --- generation -------------------------------------------------------------------------

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams | None = None
    ) -> Completion:
        """Generate a completion of ``prompt_ids``.

        Raises:
            InvalidInputError: The prompt is empty, has ids outside the vocabulary, or leaves no
                room for ``max_tokens`` within :attr:`max_model_len`.
            AglError: The engine is not running.
        """
        async for event in self._events(prompt_ids, params or SamplingParams(), stream=False):
            completion = event
        assert isinstance(completion, Completion)
        return completion

    def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams | None = None
    ) -> AsyncGenerator[Token | Completion, None]:
        """Generate, yielding each :class:`Token` as it is sampled, then the :class:`Completion`.

        The request is submitted on the first iteration (which raises what :meth:`generate`
        raises). Closing the iterator early drops the request from its batch.
        """
        return self._events(prompt_ids, params or SamplingParams(), stream=True)

    def generate_sync(
        self, prompt_ids: Sequence[int], params: SamplingParams | None = None
    ) -> Completion:
        """:meth:`generate`, blocking the calling thread instead (not for use in event loops)."""
        events: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        self._submit(prompt_ids, params or SamplingParams(), events.put, stream=False)
        event = events.get()
        if isinstance(event, BaseException):
            raise event
        assert isinstance(event, Completion)
        return event

    async def _events(
        self, prompt_ids: Sequence[int], params: SamplingParams, *, stream: bool
    ) -> AsyncGenerator[Token | Completion, None]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[_Event] = asyncio.Queue()

        def emit(event: _Event) -> None:
            try:
                loop.call_soon_threadsafe(events.put_nowait, event)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                request.cancelled = True

        request = self._submit(prompt_ids, params, emit, stream=stream)
        try:
            while True:
                event = await events.get()
                if isinstance(event, BaseException):
                    raise event
                yield event
                if isinstance(event, Completion):
                    return
        finally:
            request.cancelled = True  # no-op once finished; else the batch drops the row

    def _submit(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        emit: Callable[[_Event], None],
        *,
        stream: bool,
    ) -> _Request:
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            _invalid("prompt", prompt, "at least one token id")
        bad = [t for t in prompt if not 0 <= t < self.vocab_size]
        if bad:
            _invalid("prompt", bad[0], f"token ids in [0, {self.vocab_size})")
        room = self.max_model_len - len(prompt)
        if room < 1:
            raise InvalidInputError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"your request has {len(prompt)} input tokens. Please reduce the length of the "
                "input.",
                field="prompt",
            )
        if params.max_tokens is not None and params.max_tokens > room:
            raise InvalidInputError(
                f"'max_tokens' is too large: {params.max_tokens}. This model's maximum context "
                f"length is {self.max_model_len} tokens and your request has {len(prompt)} input "
                f"tokens ({params.max_tokens} > {self.max_model_len} - {len(prompt)}).",
                field="max_tokens",
                value=params.max_tokens,
            )
        request = _Request(prompt, params, params.max_tokens or room, emit, stream)
        with self._cond:
            if not self._running:
                raise AglError("the generation engine is not running; call start() first")
            self._waiting.append(request)
            self._cond.notify_all()
        return request

    # --- weights ----------------------------------------------------------------------------

    def update_weights(self, weights: WeightsLike) -> int:
        """Load new weights between two batches; return their version once they are in use.

        Thread safe. Requests submitted after this returns run with the new weights; running
        ones finish with the weights they started with.

        Args:
            weights: A state dict of this model's architecture (tied weights may be left out),
                or a model folder saved with ``save_pretrained`` (its ``*.safetensors``).

        Raises:
            InvalidInputError: The weights do not fit the model (names the missing, unexpected
                or misshapen tensors), or the folder has no safetensors file.
        """
        state = load_weights(weights) if isinstance(weights, str | os.PathLike) else dict(weights)
        self._check_fits(state)
        update = _Update(state)
        with self._cond:
            queued = self._running
            if queued:  # the engine thread applies it before its next batch
                self._updates.append(update)
                self._cond.notify_all()
        if not queued:
            self._apply([update])
        return update.done.result()

    async def update_weights_async(self, weights: WeightsLike) -> int:
        """:meth:`update_weights` from an event loop (loading and waiting on a worker thread)."""
        return await asyncio.to_thread(self.update_weights, weights)

    def _check_fits(self, state: Mapping[str, torch.Tensor]) -> None:
        own = self.model.state_dict(keep_vars=True)
        unexpected = sorted(set(state) - set(own))
        names_of: dict[int, list[str]] = {}
        for name, tensor in own.items():  # tied weights: one tensor under several names
            names_of.setdefault(id(tensor), []).append(name)
        missing = sorted(
            names[0] for names in names_of.values() if not any(n in state for n in names)
        )
        misshapen = sorted(
            n for n in set(state) & set(own) if tuple(state[n].shape) != tuple(own[n].shape)
        )
        if unexpected or missing or misshapen:
            raise InvalidInputError(
                "the weights do not fit the model: "
                f"missing {_few(missing)}, unexpected {_few(unexpected)}, "
                f"wrong shape {_few(misshapen)}",
                field="weights",
            )

    def _apply(self, updates: Iterable[_Update]) -> None:
        with self._model_lock, torch.no_grad():
            for update in updates:
                try:
                    self.model.load_state_dict(update.state, strict=False)
                except Exception as exc:  # checked before queueing: should not happen
                    logger.exception("a weight update failed")
                    update.done.set_exception(exc)
                    continue
                self._version += 1
                update.done.set_result(self._version)

    # --- the engine thread ------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._running and not (self._waiting or self._updates):
                    self._cond.wait()
                updates, self._updates = self._updates, []
                if not self._running:
                    dropped, self._waiting = self._waiting, []
                    break
            if updates:
                self._apply(updates)
                continue
            batch = self._take_batch()
            if batch:
                self._run(batch)
        self._apply(updates)
        for request in dropped:
            request.emit(AglError("the generation engine stopped before running this request"))

    def _take_batch(self) -> list[_Request]:
        """The next batch: wait for more requests while they keep coming (see ``batch_wait_s``)."""
        longest = time.monotonic() + _MAX_WAITS * self.batch_wait_s
        deadline, seen = 0.0, 0
        with self._cond:
            while self._running and not self._updates and len(self._waiting) < self.max_batch_size:
                now = time.monotonic()
                if len(self._waiting) > seen:  # one more came: give the next one a chance
                    seen, deadline = len(self._waiting), min(now + self.batch_wait_s, longest)
                if now >= deadline:
                    break
                self._cond.wait(deadline - now)
            waiting = [r for r in self._waiting if not r.cancelled]
            batch, self._waiting = waiting[: self.max_batch_size], waiting[self.max_batch_size :]
        return batch

    def _run(self, batch: list[_Request]) -> None:
        self._count(batch=len(batch))
        try:
            with self._model_lock, torch.inference_mode():
                self._decode(batch, self._version)
        except Exception as exc:
            logger.exception("a batch of %d requests failed", len(batch))
            for request in batch:
                request.emit(exc)

    def _count(self, *, batch: int = 0, requests: int = 0, tokens: int = 0) -> None:
        """Add to the stats (before the completions they count are emitted)."""
        stats = self._stats
        self._stats = EngineStats(
            batches=stats.batches + (batch > 0),
            requests=stats.requests + requests,
            largest_batch=max(stats.largest_batch, batch),
            tokens=stats.tokens + tokens,
        )

    def _decode(self, batch: list[_Request], version: int) -> None:
        """Prefill and decode ``batch`` until every row is done."""
        device = self.device
        width = max(len(r.prompt_ids) for r in batch)
        ids = torch.zeros((len(batch), width), dtype=torch.long)  # padding: masked out
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, request in enumerate(batch):
            ids[row, width - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids)
            mask[row, width - len(request.prompt_ids) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
        )
        rows = list(batch)
        sampler = _Sampler(rows, device, self._rng, version)
        while True:
            chosen = sampler.sample(out.logits[:, -1, :])
            self._count(tokens=len(rows))
            keep = [
                i
                for i, (request, step) in enumerate(zip(rows, chosen, strict=True))
                if self._advance(request, step, version)
            ]
            if not keep:
                return
            cache = out.past_key_values
            if len(keep) < len(rows):
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                rows = [rows[i] for i in keep]
                mask, positions = mask[index], positions[index]
                sampler.select(index, keep)
            next_ids = torch.tensor([[r.token_ids[-1]] for r in rows], device=device)
            mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=-1)
            positions = positions[:, -1:] + 1
            out = self.model(
                input_ids=next_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            )

    def _advance(self, request: _Request, step: Token, version: int) -> bool:
        """Add a sampled token to ``request``; finish it if it is done. True if it goes on."""
        if request.cancelled:
            return False
        request.token_ids.append(step.id)
        request.logprobs.append(step.logprob)
        request.top_logprobs.append(step.top_logprobs)
        if request.stream:
            request.emit(step)
        finish: Literal["stop", "length"] | None = None
        stop_reason = None
        if step.id in self.eos_token_ids:
            finish = "stop"
        elif request.params.stop:
            text = self.tokenizer.decode(request.token_ids, skip_special_tokens=True)
            stop_reason = next((s for s in request.params.stop if s in text), None)
            finish = "stop" if stop_reason is not None else None
        if finish is None and len(request.token_ids) >= request.limit:
            finish = "length"
        if finish is None:
            return True
        self._count(requests=1)
        request.emit(
            Completion(
                prompt_ids=request.prompt_ids,
                token_ids=request.token_ids,
                logprobs=request.logprobs,
                top_logprobs=request.top_logprobs,
                finish_reason=finish,
                weight_version=version,
                stop_reason=stop_reason,
            )
        )
        return False


class _Sampler:
    """Per-row sampling for a batch: greedy or temperature + top-p, shared or own generators."""

    def __init__(
        self, rows: Sequence[_Request], device: torch.device, rng: torch.Generator, version: int
    ) -> None:
        params = [r.params for r in rows]
        self.version = version
        self.temperature = torch.tensor([p.temperature for p in params], device=device)
        self.top_p = torch.tensor([p.top_p for p in params], device=device)
        self.top_k = [p.top_logprobs for p in params]
        self.generators = [_generator(p.seed, device) for p in params]
        self.rng = rng

    def select(self, index: torch.Tensor, keep: Sequence[int]) -> None:
        """Keep only the rows ``keep`` (``index`` as a tensor)."""
        self.temperature, self.top_p = self.temperature[index], self.top_p[index]
        self.top_k = [self.top_k[i] for i in keep]
        self.generators = [self.generators[i] for i in keep]

    def sample(self, logits: torch.Tensor) -> list[Token]:
        """One token per row from ``logits`` (rows x vocabulary)."""
        logits = logits.float()
        logprobs = torch.log_softmax(logits, dim=-1)
        chosen = logits.argmax(dim=-1)
        greedy = self.temperature == 0
        if not bool(greedy.all()):
            scaled = logits / torch.where(greedy, 1.0, self.temperature).unsqueeze(-1)
            probs = _top_p(torch.softmax(scaled, dim=-1), self.top_p)
            # The exponential race: argmax(p / E), E ~ Exp(1), draws from p (as vLLM samples).
            noise = torch.empty_like(probs).exponential_(generator=self.rng)
            for row, generator in enumerate(self.generators):
                if generator is not None:
                    noise[row].exponential_(generator=generator)
            sampled = (probs / noise.clamp_(min=torch.finfo(noise.dtype).tiny)).argmax(dim=-1)
            chosen = torch.where(greedy, chosen, sampled)
        chosen_logprobs = logprobs.gather(-1, chosen.unsqueeze(-1)).squeeze(-1).tolist()
        k = max(self.top_k)
        top: list[list[tuple[int, float]]] = [[] for _ in self.top_k]
        if k:
            values, indices = logprobs.topk(min(k, logprobs.shape[-1]), dim=-1)
            for row, (vals, ids) in enumerate(zip(values.tolist(), indices.tolist(), strict=True)):
                top[row] = list(zip(ids, vals, strict=True))[: self.top_k[row]]
        return [
            Token(token, logprob, top[row], self.version)
            for row, (token, logprob) in enumerate(
                zip(chosen.tolist(), chosen_logprobs, strict=True)
            )
        ]


def _top_p(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero the tail of each row beyond its nucleus (the first token always stays)."""
    if bool((top_p >= 1).all()):
        return probs
    ordered, order = probs.sort(dim=-1, descending=True)
    outside = ordered.cumsum(dim=-1) - ordered > top_p.unsqueeze(-1)
    return torch.zeros_like(probs).scatter_(-1, order, ordered.masked_fill(outside, 0.0))


def _generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    if seed is None:
        return None
    generator = torch.Generator(device)
    generator.manual_seed(seed)
    return generator


def load_weights(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Read the state dict of a model folder saved with ``save_pretrained`` (or one file).

    Raises:
        InvalidInputError: ``path`` holds no ``*.safetensors`` file.
    """
    from safetensors.torch import load_file

    where = Path(path)
    files = [where] if where.is_file() else sorted(where.glob("*.safetensors"))
    if not files or any(f.suffix != ".safetensors" for f in files):
        _invalid("weights", str(path), "a model folder with *.safetensors files, or such a file")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(file))
    return state


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    config = getattr(model, "generation_config", None)
    for value in (getattr(tokenizer, "eos_token_id", None), getattr(config, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    return frozenset(ids)


def _few(names: Sequence[str]) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:5])
    return f"{shown} (+{len(names) - 5} more)" if len(names) > 5 else shown


def _invalid(name: str, value: Any, expected: str) -> NoReturn:
    raise InvalidInputError(f"{name} must be {expected} (got {value!r})", field=name, value=value)
