"""LightningRL transitions as verl's ``DataProto``: the batch verl's actor and advantage code read.

verl's own rollout (its agent loop) hands the trainer a ``DataProto`` whose tensors are laid out
one way: prompts left-padded, responses right-padded, ``input_ids = [prompt | response]`` with
the response starting at the same column in every row. :func:`to_dataproto` builds exactly that
from agl's transitions, so everything after generation in verl (log-prob recomputation,
reference policy, critic, advantage estimators, the PPO update) runs unchanged.

Tensors (B samples, P prompt columns, R response columns):

=========================  ==========  =========================================================
key                        shape       content
=========================  ==========  =========================================================
``prompts``                (B, P)      prompt token ids, left-padded with ``pad_token_id``
``responses``              (B, R)      response token ids, right-padded
``input_ids``              (B, P+R)    ``prompts`` then ``responses``
``attention_mask``         (B, P+R)    1 on every real token, 0 on padding
``position_ids``           (B, P+R)    ``cumsum(attention_mask) - 1``, 0 on left padding
``response_mask``          (B, R)      1 on tokens the model sampled, 0 on padding and on the
                                       observation tokens of a merged trajectory
``token_level_scores``     (B, R)      the sample's reward on its last response token
``token_level_rewards``    (B, R)      the same (verl adds its in-reward KL here when asked)
``rollout_log_probs``      (B, R)      logprobs the engine returned (only when every sample
                                       has them)
``advantages``/``returns`` (B, R)      agl's advantages per response token, 0 where masked
                                       (only with ``advantages=True``)
=========================  ==========  =========================================================

Non-tensor fields: ``uid`` (the group a sample's baseline is computed over: verl's GRPO and
RLOO group by it), ``agl_rollout_id``, ``agl_attempt_id``, ``agl_agent``, ``agl_call_index``,
``agl_n_calls``, ``agl_weight`` (``1 / samples of its rollout``). ``meta_info`` holds
``agl_step`` and ``temperature`` when given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from agl import InvalidInputError
from agl.lightning import TransitionBatch

if TYPE_CHECKING:
    from verl import DataProto

__all__ = ["to_dataproto"]


def to_dataproto(
    transitions: TransitionBatch,
    *,
    pad_token_id: int = 0,
    max_prompt_length: int | None = None,
    max_response_length: int | None = None,
    advantages: bool = True,
    weight_advantages: bool = False,
    meta_info: Mapping[str, Any] | None = None,
) -> DataProto:
    """Lay out ``transitions`` as the ``DataProto`` verl's trainer works on.

    Args:
        transitions: The step's samples (from :class:`agl.lightning.TransitionBuilder`).
        pad_token_id: The id written in padding positions (masked out everywhere).
        max_prompt_length / max_response_length: Pad to these widths (verl compiles and
            budgets memory by them); a longer sample is an error, never truncated.
        advantages: Include agl's advantages (and ``returns``); leave False to let one of
            verl's estimators compute them from ``token_level_rewards``.
        weight_advantages: Scale each sample's advantages by its weight (``1 / samples of its
            rollout``), so a rollout that made many calls counts once in the loss, as in
            agl-torch.
        meta_info: Extra ``meta_info`` entries.

    Raises:
        InvalidInputError: the batch is empty, or a sample is longer than a given maximum.
    """
    import torch
    from verl import DataProto

    if len(transitions) == 0:
        raise InvalidInputError(
            "cannot build a DataProto from no transitions (every call of the step was "
            f"dropped: {transitions.report.summary()})",
            field="transitions",
        )
    arrays = transitions.to_arrays(
        pad_token_id=pad_token_id,
        max_prompt_length=max_prompt_length,
        max_response_length=max_response_length,
    )
    tensors: dict[str, torch.Tensor] = {
        "prompts": torch.from_numpy(arrays["prompts"]),
        "responses": torch.from_numpy(arrays["responses"]),
        "input_ids": torch.from_numpy(arrays["input_ids"]),
        "attention_mask": torch.from_numpy(arrays["attention_mask"]),
        "position_ids": torch.from_numpy(arrays["position_ids"]),
        "response_mask": torch.from_numpy(arrays["response_mask"]),
        "token_level_scores": torch.from_numpy(arrays["token_rewards"]),
        "token_level_rewards": torch.from_numpy(arrays["token_rewards"].copy()),
    }
    if bool(arrays["has_logprobs"].all()):
        tensors["rollout_log_probs"] = torch.from_numpy(arrays["old_logprobs"])
    if advantages:
        values = arrays["advantages"]
        if weight_advantages:
            values = values * arrays["weights"][:, None]
        tensors["advantages"] = torch.from_numpy(values)
        tensors["returns"] = torch.from_numpy(values.copy())
    samples = transitions.transitions
    non_tensors = {
        "uid": _objects(t.group_id for t in samples),
        "agl_rollout_id": _objects(t.rollout_id for t in samples),
        "agl_attempt_id": _objects(t.attempt_id for t in samples),
        "agl_agent": _objects(t.agent for t in samples),
        "agl_call_index": np.fromiter((t.call_index for t in samples), np.int64, len(samples)),
        "agl_n_calls": np.fromiter((t.n_calls for t in samples), np.int64, len(samples)),
        "agl_weight": arrays["weights"],
    }
    meta: dict[str, Any] = {"agl_step": max((t.step for t in samples), default=0)}
    meta.update(meta_info or {})
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta)


def _objects(values: Any) -> np.ndarray[Any, Any]:
    items = list(values)
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array
