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
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import torch

from agl import AglError
from agl.openai_wire import check_context
from agl_torch._batch import Completion, Event, Request, run_batch
from agl_torch._sampling import SamplingParams, StopCheck, Token, invalid
from agl_torch._weights import WeightsLike, check_fits, load_weights

__all__ = [
    "Completion",
    "EngineStats",
    "GenerationEngine",
    "SamplingParams",
    "Token",
    "WeightsLike",
    "load_weights",
]

logger = logging.getLogger(__name__)


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


_MAX_WAITS = 10
"""A batch waits at most this many ``batch_wait_s`` for a burst of requests to end."""


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
            invalid("max_batch_size", max_batch_size, "a positive integer")
        self.device = torch.device(device) if device is not None else model.device
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        config_len = getattr(model.config, "max_position_embeddings", None)
        length = max_model_len or config_len
        if not isinstance(length, int) or length < 2:
            invalid("max_model_len", length, "an integer >= 2 (the model's config has none)")
        self.max_model_len: int = length
        """The longest prompt + generation a request may have."""
        self.vocab_size: int = model.get_input_embeddings().num_embeddings
        self._stops = StopCheck(model, tokenizer)
        self.eos_token_ids: frozenset[int] = self._stops.eos_token_ids
        """Token ids that end a generation."""
        self._version = 0
        self._stats = EngineStats()
        self._rng = torch.Generator(self.device)
        self._rng.seed()
        self._cond = threading.Condition()
        self._waiting: list[Request] = []
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
        events: queue.SimpleQueue[Event] = queue.SimpleQueue()
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
        events: asyncio.Queue[Event] = asyncio.Queue()

        def emit(event: Event) -> None:
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
        emit: Callable[[Event], None],
        *,
        stream: bool,
    ) -> Request:
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            invalid("prompt", prompt, "at least one token id")
        bad = [t for t in prompt if not 0 <= t < self.vocab_size]
        if bad:
            invalid("prompt", bad[0], f"token ids in [0, {self.vocab_size})")
        limit = check_context(len(prompt), params.max_tokens, self.max_model_len)
        request = Request(prompt, params, limit, emit, stream)
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
        check_fits(self.model, state)
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

    def _take_batch(self) -> list[Request]:
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

    def _run(self, batch: list[Request]) -> None:
        self._count(batch=len(batch))
        try:
            with self._model_lock, torch.inference_mode():
                run_batch(
                    self.model,
                    batch,
                    device=self.device,
                    rng=self._rng,
                    version=self._version,
                    stops=self._stops,
                    count=self._count,
                )
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
