"""The learner: optimizer steps on a policy from transitions (RL) or examples (SFT).

A :class:`Learner` owns a model, its optimizer and everything needed to resume training
exactly. One call is one optimizer step (per PPO epoch) over the whole batch given, however
the batch is cut into micro-batches to fit in memory: every micro-batch's loss is divided by the
whole batch's :func:`~agl_torch.losses.loss_normalizer`, so the accumulated gradient is the
gradient of the whole-batch loss. The loss is :func:`~agl_torch.losses.policy_loss`
(PPO-clip against the behaviour logprobs the engine returned; GRPO when advantages are
group-normalized) plus ``kl_coef`` times a KL penalty to a frozen reference.

With ``lora=LoraSettings(...)`` only low-rank adapters train (peft); the reference policy is
then the same model with its adapters switched off, and :meth:`Learner.serving_state_dict`
merges the adapters into a copy of the base weights, so a server loads plain full weights.

A checkpoint (:meth:`Learner.save_checkpoint`) is a folder::

    model/          save_pretrained output: full weights, or the LoRA adapter
    optimizer.pt    the optimizer's state_dict
    rng.pt          torch's CPU (and CUDA) generator states
    state.json      step, update counter, Python and numpy RNG states, ``extra``;
                    written last, so its presence marks a complete checkpoint
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agl import AglError, InvalidInputError
from agl.lightning import Transition
from agl_torch.data import RLBatch, SFTExample, rl_batches, sft_batches
from agl_torch.losses import aggregate, kl_penalty, loss_normalizer, policy_loss, sft_loss
from agl_torch.policy import default_device, quiet_progress_bars, token_logprobs
from agl_torch.settings import Aggregation, KLKind, LearnerSettings, LoraSettings

__all__ = ["Learner", "LearnerSettings", "LoraSettings"]

_ADAPTER = "default"
_STATE_FILE = "state.json"


class Learner:
    """Optimizer steps on a causal LM: RL (:meth:`rl_step`) and SFT (:meth:`sft_step`).

    Args:
        model: A Hugging Face causal LM (:func:`~agl_torch.policy.load_policy`); moved to
            ``device`` and, with ``lora``, wrapped in a peft model (:attr:`model`).
        tokenizer: Its tokenizer (padding id, :meth:`save_pretrained`).
        settings: The update: optimizer, clipping, micro-batches, PPO, KL, LoRA, seed
            (:class:`~agl_torch.settings.LearnerSettings`; default: its defaults).
        reference: The reference policy; by default a frozen copy of ``model`` as given (with
            LoRA: ``model`` with its adapters disabled). Only used when ``kl_coef > 0``.
        device: Where to train (default: :func:`~agl_torch.policy.default_device`).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        settings: LearnerSettings | None = None,
        *,
        reference: Any = None,
        device: torch.device | str | None = None,
    ) -> None:
        settings = settings if settings is not None else LearnerSettings()
        if not isinstance(settings, LearnerSettings):
            raise InvalidInputError(
                f"settings must be a LearnerSettings, got {type(settings).__name__}",
                field="settings",
            )
        self.settings = settings
        self.device = torch.device(device) if device is not None else default_device()
        self.tokenizer = tokenizer
        self.pad_id: int = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
        self.max_grad_norm = settings.max_grad_norm
        self.micro_batch_tokens = settings.micro_batch_tokens
        self.clip_low = settings.clip_low
        self.clip_high = settings.clip_high
        self.aggregation: Aggregation = settings.aggregation
        self.kl_coef = settings.kl_coef
        self.kl_kind: KLKind = settings.kl_kind
        self.ppo_epochs = settings.ppo_epochs
        self.off_policy = "decoupled" if settings.off_policy == "decoupled" else "ppo"
        """The policy loss (``"auto"`` is ``"ppo"`` here: a learner does not know the loop;
        :class:`~agl_torch.LightningRLTorch` settles ``"auto"`` before building one)."""
        self.importance_cap = settings.importance_cap
        self.lora = lora = settings.lora
        self.updates = 0
        """Optimizer steps taken (restored by :meth:`load_checkpoint`)."""
        torch.manual_seed(settings.seed)
        model.to(self.device)
        if settings.kl_coef > 0 and reference is None and lora is None:
            reference = copy.deepcopy(model)
        if reference is not None:
            reference.to(self.device).eval().requires_grad_(False)
        self.reference = reference
        self.model = _with_lora(model, lora) if lora is not None else model
        self.model.eval()
        self._trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self._trainable,
            lr=settings.lr,
            betas=settings.betas,
            weight_decay=settings.weight_decay,
        )

    # --- steps ------------------------------------------------------------------------------

    def rl_step(self, transitions: Sequence[Transition]) -> dict[str, float]:
        """Train on a batch of transitions: ``ppo_epochs`` optimizer steps over all of it.

        Transitions without behaviour logprobs count as on-policy: with one epoch the ratio is
        taken against the detached current logprobs; with more, against the logprobs the model
        gives them before the first step.

        Returns:
            Metrics, averaged over epochs: ``loss`` (``pg_loss + kl_coef * kl``), ``pg_loss``,
            ``kl`` (with ``kl_coef > 0``), ``clip_frac``, ``approx_kl``, ``ratio_mean``,
            ``ratio_max``, ``grad_norm`` (before clipping), with decoupled PPO
            ``importance_mean``, ``importance_max``, ``importance_truncated``; and
            ``samples``, ``tokens`` (prompt and response), ``trained_tokens``, ``lr``,
            ``updates`` (the counter after the step), ``skipped`` (optimizer steps not taken:
            an empty batch, a non-finite gradient), ``time/update_s``, ``tokens/s``.
        """
        started = time.perf_counter()
        batches = rl_batches(
            transitions,
            micro_batch_tokens=self.micro_batch_tokens,
            pad_id=self.pad_id,
            device=self.device,
        )
        normalizer = sum(
            loss_normalizer(b.response_mask, aggregation=self.aggregation, weights=b.weights)
            for b in batches
        )
        if normalizer <= 0:
            return self._skipped(len(transitions))
        references = [self._reference_logprobs(b) for b in batches] if self.kl_coef > 0 else []
        proximal = []
        if self.off_policy == "decoupled":
            proximal = [self._current_logprobs(b) for b in batches]
        elif self.ppo_epochs > 1:
            batches = [self._with_behaviour_logprobs(b) for b in batches]
        totals = dict.fromkeys(
            ("loss", "pg_loss", "clip_frac", "approx_kl", "ratio_mean", "ratio_max", "grad_norm"),
            0.0,
        )
        totals["skipped"] = 0.0
        if references:
            totals["kl"] = 0.0
        if proximal:
            totals.update(importance_mean=0.0, importance_max=0.0, importance_truncated=0.0)
        with self._training():
            for _ in range(self.ppo_epochs):
                self._rl_epoch(batches, references, proximal, normalizer, totals)
        metrics = {name: value / self.ppo_epochs for name, value in totals.items()}
        metrics["skipped"] = totals["skipped"]
        tokens = sum(b.tokens for b in batches)
        trained_tokens = sum(b.trained_tokens for b in batches)
        counts = self._counts(len(transitions), tokens, trained_tokens, started, self.ppo_epochs)
        return metrics | counts

    def sft_step(self, examples: Sequence[SFTExample]) -> dict[str, float]:
        """One optimizer step of negative log-likelihood on the examples' labelled tokens.

        Returns:
            Metrics: ``loss`` (per labelled token), ``grad_norm``, ``samples``, ``tokens``,
            ``trained_tokens``, ``lr``, ``updates``, ``skipped``, ``time/update_s``,
            ``tokens/s``.
        """
        started = time.perf_counter()
        batches = sft_batches(
            examples,
            micro_batch_tokens=self.micro_batch_tokens,
            pad_id=self.pad_id,
            device=self.device,
        )
        trained_tokens = sum(b.trained_tokens for b in batches)
        if trained_tokens == 0:
            return self._skipped(len(examples))
        totals = {"loss": 0.0, "grad_norm": 0.0, "skipped": 0.0}
        with self._training():
            for batch in batches:
                logprobs = token_logprobs(
                    self.model, batch.input_ids, batch.attention_mask, needed=batch.labels_mask
                )
                loss = sft_loss(logprobs, batch.labels_mask, trained_tokens)
                torch.autograd.backward(loss)
                totals["loss"] += loss.item()
            self._optimizer_step(totals)
        tokens = sum(b.tokens for b in batches)
        return totals | self._counts(len(examples), tokens, trained_tokens, started, 1)

    # --- weights ----------------------------------------------------------------------------

    @torch.no_grad()
    def serving_state_dict(self) -> dict[str, torch.Tensor]:
        """The full weights to serve now, as CPU copies keyed like the base model's own.

        With LoRA the adapters are merged into copies of the base weights (the model being
        trained is not touched); ``load_state_dict`` of a plain base model accepts the result.
        """
        if self.lora is None:
            return {
                key: value.detach().to("cpu", copy=True)
                for key, value in self.model.state_dict().items()
            }
        from peft.tuners.lora import LoraLayer

        base = self.model.get_base_model()
        weights = {
            key.replace(".base_layer.", "."): value.detach().to("cpu", copy=True)
            for key, value in base.state_dict().items()
            if not any(part.startswith("lora_") for part in key.split("."))
        }
        for name, module in base.named_modules():
            if isinstance(module, LoraLayer):
                layer: Any = module
                weight = layer.get_base_layer().weight
                merged = weight + layer.get_delta_weight(_ADAPTER).to(weight.dtype)
                weights[f"{name}.weight"] = merged.to("cpu", copy=True)
        return weights

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write a servable Hugging Face folder: full weights (LoRA merged) and the tokenizer."""
        target = Path(directory)
        with quiet_progress_bars():
            if self.lora is None:
                self.model.save_pretrained(target)
            else:
                self.model.get_base_model().save_pretrained(
                    target, state_dict=self.serving_state_dict()
                )
            self.tokenizer.save_pretrained(target)
        return target

    # --- checkpoints ------------------------------------------------------------------------

    def save_checkpoint(
        self, directory: str | Path, *, step: int, extra: dict[str, Any] | None = None
    ) -> Path:
        """Save everything :meth:`load_checkpoint` needs to continue exactly from here.

        Args:
            directory: The checkpoint folder (created; a previous checkpoint there is replaced).
            step: The caller's step number, returned by :meth:`load_checkpoint`.
            extra: JSON-serialisable state of the caller's (data position, best score...).
        """
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        (target / _STATE_FILE).unlink(missing_ok=True)
        try:
            state_text = json.dumps(
                {
                    "step": step,
                    "updates": self.updates,
                    "extra": extra or {},
                    "python_rng": _python_rng_state(),
                    "numpy_rng": _numpy_rng_state(),
                }
            )
        except TypeError as exc:
            raise InvalidInputError(
                f"extra is not JSON-serialisable: {exc}", field="extra"
            ) from exc
        with quiet_progress_bars():
            self.model.save_pretrained(target / "model")
        torch.save(self.optimizer.state_dict(), target / "optimizer.pt")
        generators = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            generators["cuda"] = torch.stack(torch.cuda.get_rng_state_all())
        torch.save(generators, target / "rng.pt")
        (target / _STATE_FILE).write_text(state_text, encoding="utf-8")
        return target

    def load_checkpoint(self, directory: str | Path) -> tuple[int, dict[str, Any]]:
        """Restore a checkpoint into this learner (built with the checkpoint's settings).

        Weights, optimizer state, update counter and the torch, Python and numpy random
        generators come back as they were saved, so training continues exactly as if it had
        never stopped.

        Returns:
            ``(step, extra)`` as given to :meth:`save_checkpoint`.

        Raises:
            AglError: the folder is not a complete checkpoint, or its weights do not fit the
                model.
        """
        source = Path(directory)
        if not (source / _STATE_FILE).is_file():
            raise AglError(f"{source} is not a complete checkpoint: it has no {_STATE_FILE}")
        state = json.loads((source / _STATE_FILE).read_text(encoding="utf-8"))
        self._load_weights(source / "model")
        # Loaded on the CPU: load_state_dict moves each state to its parameter's device and
        # keeps Adam's step counters where the optimizer wants them (a checkpoint saved on a
        # GPU resumes on the CPU, and the other way round).
        self.optimizer.load_state_dict(
            torch.load(source / "optimizer.pt", map_location="cpu", weights_only=True)
        )
        generators = torch.load(source / "rng.pt", weights_only=True)
        torch.set_rng_state(generators["cpu"])
        if "cuda" in generators and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(list(generators["cuda"]))
        python_rng = state["python_rng"]
        random.setstate((python_rng[0], tuple(python_rng[1]), python_rng[2]))
        name, keys, position, has_gauss, cached = state["numpy_rng"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))
        self.updates = int(state["updates"])
        return int(state["step"]), dict(state["extra"])

    # --- helpers ----------------------------------------------------------------------------

    def _rl_epoch(
        self,
        batches: list[RLBatch],
        references: list[torch.Tensor],
        proximal: list[torch.Tensor],
        normalizer: float,
        totals: dict[str, float],
    ) -> None:
        """One optimizer step over all micro-batches; adds this epoch's metrics to ``totals``."""
        trained_tokens = sum(b.trained_tokens for b in batches)
        ratio_max = importance_max = 0.0
        for index, batch in enumerate(batches):
            logprobs = _response_logprobs(self.model, batch)
            loss, stats = policy_loss(
                logprobs,
                batch.old_logprobs,
                batch.advantages,
                batch.response_mask,
                proximal_logprobs=proximal[index] if proximal else None,
                importance_cap=self.importance_cap,
                clip_low=self.clip_low,
                clip_high=self.clip_high,
                aggregation=self.aggregation,
                weights=batch.weights,
                normalizer=normalizer,
            )
            totals["pg_loss"] += loss.item()
            if references:
                kl = aggregate(
                    kl_penalty(logprobs, references[index], self.kl_kind),
                    batch.response_mask,
                    aggregation=self.aggregation,
                    weights=batch.weights,
                    normalizer=normalizer,
                )
                totals["kl"] += kl.item()
                loss = loss + self.kl_coef * kl
            torch.autograd.backward(loss)
            totals["loss"] += loss.item()
            share = stats["tokens"] / trained_tokens
            for name in ("clip_frac", "approx_kl", "ratio_mean"):
                totals[name] += stats[name] * share
            ratio_max = max(ratio_max, stats["ratio_max"])
            if proximal:
                for name in ("importance_mean", "importance_truncated"):
                    totals[name] += stats[name] * share
                importance_max = max(importance_max, stats["importance_max"])
        totals["ratio_max"] += ratio_max
        if proximal:
            totals["importance_max"] += importance_max
        self._optimizer_step(totals)

    @contextlib.contextmanager
    def _training(self) -> Iterator[None]:
        """Train mode (dropout on) inside the block, eval mode after it."""
        self.model.train()
        try:
            yield
        finally:
            self.model.eval()

    def _optimizer_step(self, totals: dict[str, float]) -> None:
        """Clip, step (unless the gradient is not finite) and free the gradients."""
        limit = self.max_grad_norm if self.max_grad_norm is not None else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self._trainable, limit))
        totals["grad_norm"] += grad_norm
        if math.isfinite(grad_norm):
            self.optimizer.step()
            self.updates += 1
        else:
            totals["skipped"] += 1
        self.optimizer.zero_grad(set_to_none=True)

    @torch.no_grad()
    def _reference_logprobs(self, batch: RLBatch) -> torch.Tensor:
        if self.reference is not None:
            return _response_logprobs(self.reference, batch)
        with self.model.disable_adapter():
            return _response_logprobs(self.model, batch)

    @torch.no_grad()
    def _current_logprobs(self, batch: RLBatch) -> torch.Tensor:
        """The logprobs the weights give the batch now, before the update (eval mode)."""
        return _response_logprobs(self.model, batch)

    @torch.no_grad()
    def _with_behaviour_logprobs(self, batch: RLBatch) -> RLBatch:
        unknown = torch.isnan(batch.old_logprobs)
        if not unknown.any():
            return batch
        current = _response_logprobs(self.model, batch)
        return replace(batch, old_logprobs=torch.where(unknown, current, batch.old_logprobs))

    def _load_weights(self, folder: Path) -> None:
        if self.lora is not None:
            from peft import set_peft_model_state_dict
            from peft.utils import load_peft_weights

            result: Any = set_peft_model_state_dict(
                self.model, load_peft_weights(str(folder), device=str(self.device))
            )
            if result.unexpected_keys:
                raise AglError(f"{folder}: adapter weights {result.unexpected_keys} do not fit")
            return
        from safetensors.torch import load_file

        weights: dict[str, torch.Tensor] = {}
        for file in sorted(folder.glob("*.safetensors")):
            weights.update(load_file(file, device=str(self.device)))
        missing, unexpected = self.model.load_state_dict(weights, strict=False)
        # save_pretrained leaves out tied weights (an output head sharing the embeddings).
        own = self.model.state_dict()
        loaded = {own[key].data_ptr() for key in weights if key in own}
        untied = [key for key in missing if own[key].data_ptr() not in loaded]
        if untied or unexpected:
            raise AglError(
                f"{folder}: the saved weights do not fit the model (missing {untied}, "
                f"unexpected {unexpected})"
            )

    def _skipped(self, samples: int) -> dict[str, float]:
        return {
            "samples": float(samples),
            "tokens": 0.0,
            "trained_tokens": 0.0,
            "skipped": 1.0,
            "updates": float(self.updates),
        }

    def _counts(
        self, samples: int, tokens: int, trained_tokens: int, started: float, passes: int
    ) -> dict[str, float]:
        elapsed = time.perf_counter() - started
        return {
            "samples": float(samples),
            "tokens": float(tokens),
            "trained_tokens": float(trained_tokens),
            "lr": float(self.optimizer.param_groups[0]["lr"]),
            "updates": float(self.updates),
            "time/update_s": elapsed,
            "tokens/s": tokens * passes / elapsed if elapsed > 0 else 0.0,
        }


def _with_lora(model: Any, settings: LoraSettings) -> Any:
    from peft import LoraConfig, get_peft_model

    target = (
        settings.target_modules
        if isinstance(settings.target_modules, str)
        else list(settings.target_modules)
    )
    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=target,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def _python_rng_state() -> list[Any]:
    version, internal, gauss = random.getstate()
    return [version, list(internal), gauss]


def _numpy_rng_state() -> list[Any]:
    state: Any = np.random.get_state(legacy=True)
    name, keys, position, has_gauss, cached = state
    return [name, keys.tolist(), int(position), int(has_gauss), float(cached)]


def _response_logprobs(model: Any, batch: RLBatch) -> torch.Tensor:
    """The logprobs ``model`` gives the batch's response tokens (0 elsewhere)."""
    return token_logprobs(model, batch.input_ids, batch.attention_mask, needed=batch.response_mask)
