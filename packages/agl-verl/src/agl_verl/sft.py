"""SFT on verl's SFT trainer: the algorithm ``"sft-verl"``, and :func:`train_sft` outside a run.

::

    # outside a run: a chat dataset, or transitions (exact token ids)
    result = train_sft("Qwen/Qwen2.5-1.5B-Instruct", messages="chats.jsonl", output_dir="sft")
    result.hf_model  # a Hugging Face folder vLLM serves

    # in a run: distil the best rollouts of a served model (same tokenizer) into the student
    algorithm = SFTVerl(
        "Qwen/Qwen2.5-1.5B-Instruct",
        llm="http://teacher:8000/v1",
        min_reward=1.0,
        loop=agl.LoopSettings(n_samples=4),
        sft=SFTSettings(config={"trainer.n_gpus_per_node": 8}),
    )
    agl.Trainer(algorithm=algorithm).fit(agent, "train.jsonl")

verl (FSDP, its SFT loss, checkpoints) does the training, in its own processes
(:mod:`agl_verl.sft_trainer`). agl brings the data:

- **chat conversations** (``messages``: a list or any dataset :func:`agl.load_tasks`
  reads), rendered by verl's multi-turn SFT dataset with the model's chat template, the loss
  on assistant turns; ``"sft-verl"`` trains on them before the first rollout;
- **the best rollouts of each step** (rejection sampling / distillation): ``"sft-verl"`` runs
  ``loop.n_samples`` rollouts per task against ``llm`` (an OpenAI-compatible server with token
  ids, vLLM for one, behind agl's gateway), keeps each task's ``top_k`` best rewarded
  ``min_reward`` or more, and trains on their transitions' exact token ids every
  ``train_every`` steps and after the last. The served model must share the student's
  tokenizer (a larger model of the same family, or the student itself): the ids are trained
  as they are.

Each training round writes its data, verl's config, log, metrics and checkpoints under
``<run_dir>/sft-verl/<round>/``; the next round continues from the last one's Hugging Face
model. After every step the algorithm saves where it stands (:mod:`agl_verl.sft_state`), so
``SFTVerl(..., resume=True)`` continues a stopped run without training a round twice or losing
the samples kept since the last one.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agl import (
    LLM,
    AlgorithmContext,
    DatasetSource,
    InvalidInputError,
    LoopSettings,
    Resource,
    SamplingSettings,
    StepAlgorithm,
    StepBatch,
    load_tasks,
    model_or_env,
    settings,
)
from agl.lightning import Transition, TransitionBuilder, best_transitions
from agl_verl.rl import MODEL_ENV, served_model
from agl_verl.sft_data import (
    token_rows_from_transitions,
    write_conversation_rows,
    write_token_rows,
)
from agl_verl.sft_settings import SFTSettings
from agl_verl.sft_state import SFTState
from agl_verl.sft_trainer import (
    DataKind,
    SFTRun,
    build_sft_config,
    run_verl_sft,
    total_sft_steps,
    validate_sft_config,
)

__all__ = ["SFTSettings", "SFTVerl", "train_sft"]

logger = logging.getLogger(__name__)

StepCallback = Callable[[int, int | None, dict[str, Any]], None]


def train_sft(
    model: str | os.PathLike[str] | None,
    *,
    output_dir: str | os.PathLike[str],
    messages: DatasetSource | Sequence[Any] | None = None,
    transitions: Sequence[Transition] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    sft: SFTSettings | Mapping[str, Any] | None = None,
    on_step: StepCallback | None = None,
    progress: bool = True,
) -> SFTRun:
    """Fine-tune ``model`` with verl's SFT trainer on conversations or transitions.

    Args:
        model: A Hugging Face model folder or hub id (default: ``$AGL_VERL_MODEL``).
        output_dir: verl's ``trainer.default_local_dir``: the data file, verl's config, log,
            metrics and checkpoints.
        messages: Chat conversations (lists of OpenAI-format messages, or dicts with
            ``messages`` and ``tools``), a list or a dataset :func:`agl.load_tasks`
            reads (JSONL, Parquet, a HF dataset).
        transitions: Or transitions: their exact prompt and response token ids, the loss on
            the response's unmasked tokens.
        tools: Tools rendered into every conversation (unless it has its own).
        sft: verl's SFT trainer: config overrides, batch sizes, epochs, maximum length,
            learning rate, launcher (:class:`~agl_verl.sft_settings.SFTSettings`, or a mapping
            of its fields).
        on_step: Called with (step, steps in all, metrics) after each of verl's steps.
        progress: Show a progress bar (steps, loss) on the console while verl trains.

    Returns:
        verl's run: metrics per step, the last checkpoint and its Hugging Face folder; and in
        ``written``, what the data file holds and what was dropped.

    Raises:
        InvalidInputError: no model, or not exactly one of ``messages`` and ``transitions``,
            or no sample left to train on.
        VerlConfigError: the config cannot run (checked before verl starts).
        VerlSFTError: verl's trainer failed (the message ends with its log).
    """
    options = settings("sft", sft, SFTSettings())
    path = model_or_env(model, MODEL_ENV)
    if path is None:
        raise InvalidInputError(
            "train_sft needs a model: train_sft('path/or/hub-id', ...), or $AGL_VERL_MODEL",
            field="model",
        )
    if (messages is None) == (transitions is None):
        raise InvalidInputError(
            "give train_sft exactly one of messages= and transitions=", field="messages"
        )
    folder = Path(output_dir)
    data_file = folder / "data.parquet"
    if transitions is not None:
        written = write_token_rows(
            data_file, token_rows_from_transitions(transitions), max_length=options.max_length
        )
        kind: DataKind = "tokens"
    else:
        from transformers import AutoTokenizer

        conversations = _conversations(messages)
        tokenizer = AutoTokenizer.from_pretrained(path)
        written = write_conversation_rows(
            data_file,
            conversations,
            tokenizer=tokenizer,
            max_length=options.max_length,
            tools=tools,
        )
        kind = "chat"
    if written.rows == 0:
        raise InvalidInputError(
            f"no sample is left to train on (dropped: {dict(written.dropped)})",
            field="transitions" if transitions is not None else "messages",
        )
    sft_config = build_sft_config(
        options.config,
        model_path=path,
        train_files=data_file,
        data=kind,
        output_dir=folder,
        batch_size=options.batch_size,
        micro_batch_size=options.micro_batch_size,
        max_length=options.max_length,
        epochs=options.epochs,
        lr=options.lr,
    )
    if options.batch_size is None and "train_batch_size" not in _keys(options.config, "data"):
        # agl's default batch, or the whole data when it is smaller (still split evenly).
        ranks = int(sft_config.trainer.n_gpus_per_node) * int(sft_config.trainer.nnodes)
        fitted = min(int(sft_config.data.train_batch_size), written.rows)
        sft_config.data.train_batch_size = max(ranks, fitted - fitted % ranks)
    validate_sft_config(sft_config, n_samples=written.rows)
    total = total_sft_steps(sft_config, written.rows)
    with _progress(progress, total, on_step) as callback:
        run = run_verl_sft(
            sft_config,
            launcher=options.launcher,
            nproc_per_node=options.nproc_per_node,
            env=options.env,
            total_steps=total,
            on_step=callback,
        )
    run.written = written
    return run


@contextmanager
def _progress(show: bool, total: int, on_step: StepCallback | None) -> Iterator[StepCallback]:
    """``on_step``, plus a progress bar of verl's steps and loss when ``show``."""
    if not show:
        yield on_step or (lambda step, total, metrics: None)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn("verl SFT"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[loss]}"),
    ) as bar:
        task = bar.add_task("sft", total=total, loss="")

        def callback(step: int, steps: int | None, metrics: dict[str, Any]) -> None:
            loss = metrics.get("train/loss")
            bar.update(task, completed=step, loss="" if loss is None else f"loss {loss:.4f}")
            if on_step is not None:
                on_step(step, steps, metrics)

        yield callback


def _conversations(messages: DatasetSource | Sequence[Any] | None) -> list[Any]:
    if isinstance(messages, Sequence) and not isinstance(messages, str | bytes):
        return list(messages)
    assert messages is not None
    return list(load_tasks(messages))


def _keys(config: Any, section: str) -> set[str]:
    from agl_verl.config import load_overrides

    tree = load_overrides(config)
    node = tree.get(section)
    return {str(key) for key in node} if node is not None else set()


class SFTVerl(StepAlgorithm):
    """Supervised fine-tuning with verl's SFT trainer (see the module docstring).

    Args:
        model: The student: a Hugging Face folder or hub id (default: ``$AGL_VERL_MODEL``).
        llm: The server(s) the rollouts call (OpenAI-compatible, token ids on: vLLM), put
            behind agl's gateway; its model must share the student's tokenizer. Needed when
            the run has training tasks.
        model_name: The model name to call it with (default: its first ``/v1/models`` entry).
        messages / tools: Chat conversations to train on before the first rollout.
        top_k / min_reward: Which rollouts of each step to learn from (each task's ``top_k``
            best rewarded ``min_reward`` or more).
        train_every: Train on the kept samples every this many steps (None: once, after the
            last step).
        resource: The name of the LLM resource agents receive.
        loop: The rollout loop (:class:`agl.LoopSettings`: tasks per step, rollouts per task
            (4 by default), epochs, step limit and timeout).
        sampling: Sampling parameters published with the LLM resource
            (:class:`agl.SamplingSettings`).
        sft: verl's SFT trainer for each round (:class:`~agl_verl.sft_settings.SFTSettings`:
            config overrides, batch sizes, epochs, maximum length, learning rate, launcher).
        resume: Continue a run that stopped, from the state saved after its last step in
            ``<run_dir>/sft-verl/`` (:mod:`agl_verl.sft_state`): the rounds already trained
            are not trained again, the next round starts from the last one's model, and the
            samples kept since then are kept. False (the default) starts afresh.

    Attributes:
        trained_model: The Hugging Face folder of the last round (None before one).
        rounds: Every round's :class:`~agl_verl.sft_trainer.SFTRun`.
    """

    name = "sft-verl"

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        llm: str | Sequence[str] | None = None,
        model_name: str | None = None,
        messages: DatasetSource | Sequence[Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        top_k: int = 1,
        min_reward: float = 1.0,
        train_every: int | None = None,
        resource: str = "llm",
        loop: LoopSettings | Mapping[str, Any] | None = None,
        sampling: SamplingSettings | Mapping[str, Any] | None = None,
        sft: SFTSettings | Mapping[str, Any] | None = None,
        resume: bool = False,
    ) -> None:
        if train_every is not None and train_every < 1:
            raise InvalidInputError(f"train_every must be at least 1, got {train_every}")
        if top_k < 1:
            raise InvalidInputError(f"top_k must be at least 1, got {top_k}")
        self.model = model_or_env(model, MODEL_ENV)
        self.upstreams = [llm] if isinstance(llm, str) else list(llm or [])
        self.model_name = model_name
        self.messages = messages
        self.tools = tools
        self.top_k = top_k
        self.min_reward = min_reward
        self.train_every = train_every
        self.loop = settings("loop", loop, LoopSettings(n_samples=4))
        # Every group counts for SFT, the ones whose rollouts all succeeded above all.
        self.transitions = TransitionBuilder(drop_zero_variance=False)
        self.resource = resource
        self.sampling = settings("sampling", sampling, SamplingSettings())
        self.sft = settings("sft", sft, SFTSettings())
        self.trained_model: Path | None = None
        self.rounds: list[SFTRun] = []
        self.pending: list[Transition] = []
        self.messages_trained = False
        self.last_step = 0
        self.root: Path | None = None
        self.resume = resume
        self.resumed_step = 0

    async def setup(self, ctx: AlgorithmContext) -> Mapping[str, Resource]:
        if self.model is None:
            raise InvalidInputError(
                f"{self.name} needs a model to train: SFTVerl(model='path/or/hub-id'), or "
                "$AGL_VERL_MODEL",
                field="model",
            )
        if ctx.train_tasks and not self.upstreams:
            raise InvalidInputError(
                f"{self.name} runs the training tasks' rollouts against llm=: give the URL of "
                "an OpenAI-compatible server with token ids (vLLM) whose model shares the "
                "student's tokenizer, or no training dataset to train on messages only",
                field="llm",
            )
        self.root = ctx.run_dir / self.name
        self.last_step = self.total_steps(len(ctx.train_tasks))[0]
        saved = await asyncio.to_thread(SFTState.load, self.root) if self.resume else None
        if saved is not None:
            self.resumed_step, self.messages_trained = saved.step, saved.messages_trained
            self.trained_model, self.pending = saved.trained_model, saved.pending
            logger.info(
                "%s resumes after step %d (model %s, %d pending transitions)",
                self.name,
                saved.step,
                saved.trained_model or self.model,
                len(saved.pending),
            )
        if self.messages is not None and not self.messages_trained:
            run = await self._train(ctx, "messages", messages=_conversations(self.messages))
            ctx.log(0, _round_metrics("sft/messages/", run))
            self.messages_trained = True
            await self._save(0)
        if not self.upstreams:
            return {}
        name = self.model_name or await served_model(self.upstreams[0])
        llm: LLM = await ctx.serve_llm(self.upstreams, name, self.sampling.parameters())
        return {self.resource: llm}

    async def step(self, ctx: AlgorithmContext, batch: StepBatch) -> Mapping[str, Resource]:
        kept = best_transitions(batch, top_k=self.top_k, min_reward=self.min_reward)
        self.pending.extend(kept)
        batch.metrics["sft/kept_transitions"] = float(len(kept))
        batch.metrics["sft/pending_transitions"] = float(len(self.pending))
        last = batch.step >= self.last_step
        due = last or (self.train_every is not None and batch.step % self.train_every == 0)
        # A round before the last waits for a full SFT batch; the last trains what there is
        # (too little for the batch is then an error naming both numbers).
        enough = len(self.pending) >= (self.sft.batch_size or 1)
        if due and self.pending and (enough or last):
            run = await self._train(ctx, f"step-{batch.step}", transitions=self.pending)
            self.pending = []
            batch.metrics.update(_round_metrics("sft/", run))
        await self._save(batch.step)
        return {}

    def resume_step(self) -> int:
        return self.resumed_step

    async def _save(self, step: int) -> None:
        assert self.root is not None
        state = SFTState(step, self.messages_trained, self.trained_model, list(self.pending))
        await asyncio.to_thread(state.save, self.root)

    async def _train(self, ctx: AlgorithmContext, label: str, **data: Any) -> SFTRun:
        assert self.root is not None
        student = str(self.trained_model or self.model)
        run = await asyncio.to_thread(
            train_sft,
            student,
            output_dir=self.root / label,
            tools=self.tools,
            **data,
            sft=self.sft,
            progress=False,  # the run's own display is live
        )
        self.rounds.append(run)
        if run.hf_model is not None:
            self.trained_model = run.hf_model
        return run


def _round_metrics(prefix: str, run: SFTRun) -> dict[str, float]:
    metrics = {
        "steps": float(run.steps),
        "seconds": run.seconds,
        "samples": float(run.written.rows if run.written is not None else 0),
    }
    first = next((row["train/loss"] for row in run.metrics if "train/loss" in row), None)
    last = run.final("train/loss")
    if first is not None and last is not None:
        metrics["loss_first"] = float(first)
        metrics["loss_last"] = last
    if run.written is not None:
        metrics.update({f"dropped/{k}": float(v) for k, v in run.written.dropped.items()})
    return {f"{prefix}{key}": value for key, value in metrics.items()}
