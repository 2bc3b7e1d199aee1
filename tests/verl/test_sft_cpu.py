"""verl's real SFT trainer, run by agl on CPU: on conversations, on the best rollouts, and failing.

verl 0.9 has no CPU platform; the processes agl launches load one through verl's own hook for
other hardware (``VERL_USE_EXTERNAL_MODULES``, see ``verl_cpu_platform``). Everything else is
verl's: ``torchrun``, its SPMD SFT trainer, the FSDP2 engine, its SFT loss, its checkpoints
and their Hugging Face copy, which the tests load with transformers to see what was learned.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pyarrow.parquet as pq
import pytest
import torch
from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer

import agl
import agl._train._metrics
from agl.testing.openai_server import EOS_ID, OpenAIServer, encode, render_chat
from agl_verl.sft import SFTVerl, train_sft
from agl_verl.sft_settings import SFTSettings
from agl_verl.sft_trainer import VerlSFTError, build_sft_config, run_verl_sft

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def logprob(model_dir: Path, input_ids: list[int], trained: list[int]) -> float:
    """Sum of the model's log-probabilities of the tokens marked in ``trained``."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = torch.tensor([input_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float()
    logprobs = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]
    return float((logprobs * torch.tensor(trained[1:], dtype=torch.float32)).sum())


CONVERSATIONS = [
    [
        {"role": "user", "content": f"what is {i} + {i} ?"},
        {"role": "assistant", "content": f"{2 * i}"},
    ]
    for i in range(16)
]


def test_verls_sft_trainer_learns_the_conversations(
    tmp_path: Path, model_dir: Path, verl_on_cpu: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative output folder means the same to verl's processes
    steps: list[tuple[int, int | None]] = []
    run = train_sft(
        model_dir,
        output_dir="sft",
        messages=CONVERSATIONS,
        sft=SFTSettings(
            config={**verl_on_cpu["config"], "optim.lr": 5e-3},
            batch_size=4,
            epochs=2,
            max_length=64,
            env=verl_on_cpu["env"],
        ),
        on_step=lambda step, total, metrics: steps.append((step, total)),
        progress=False,
    )
    # verl took 16 / 4 x 2 steps, logged each, and said so as it went
    assert run.steps == 8
    assert [row["step"] for row in run.metrics] == list(range(1, 9))
    assert steps == [(step, 8) for step in range(1, 9)]
    assert all(row["train/grad_norm"] > 0 for row in run.metrics)
    first, last = run.metrics[0]["train/loss"], run.final("train/loss")
    assert last is not None
    assert last < first
    assert run.written is not None
    assert run.written.rows == 16
    for name in ("sft_config.yaml", "verl_sft.log", "verl_metrics.jsonl", "data.parquet"):
        assert (tmp_path / "sft" / name).is_file(), name

    # verl's checkpoint, and its Hugging Face copy: the answers became likelier
    assert run.checkpoint == (tmp_path / "sft" / "global_step_8").absolute()
    assert run.hf_model == run.checkpoint / "huggingface"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    gain = 0.0
    for conversation in CONVERSATIONS[:4]:
        encoded = tokenizer.apply_chat_template(
            conversation, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        ids, mask = list(encoded["input_ids"]), list(encoded["assistant_masks"])
        gain += logprob(run.hf_model, ids, mask) - logprob(model_dir, ids, mask)
    assert gain > 0


@agl.rollout
async def answer_agent(task: dict[str, Any], llm: agl.LLM, rollout: agl.Rollout) -> float:
    """One call; reward 1 when the reply is 'yes'. The question depends on the sample."""
    sample = int(rollout.metadata["sample"])  # type: ignore[arg-type]
    question = task["questions"][sample % len(task["questions"])]
    async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="none", max_retries=0) as client:
        reply = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": question}]
        )
    return 1.0 if reply.choices[0].message.content == "yes" else 0.0


def say(request: dict[str, Any]) -> str:
    return "yes" if "yes" in request["messages"][0]["content"] else "no"


TASKS = [
    {"questions": ["say yes", "say no"]},  # rewards 1, 0: the first is kept
    {"questions": ["say no"]},  # rewards 0, 0: nothing kept
    {"questions": ["say yes please"]},  # rewards 1, 1: the best one (top_k=1) kept
]


def test_sft_verl_distils_the_best_rollouts_after_the_conversations(
    tmp_path: Path, model_dir: Path, verl_on_cpu: dict[str, Any]
) -> None:
    with OpenAIServer(say) as teacher:
        algorithm = SFTVerl(
            model_dir,
            llm=teacher.url,
            messages=CONVERSATIONS[:4],
            loop=agl.LoopSettings(n_samples=2),
            sft=SFTSettings(
                batch_size=2,
                max_length=64,
                lr=5e-3,
                config=verl_on_cpu["config"],
                env=verl_on_cpu["env"],
            ),
        )
        trainer = agl.Trainer(
            algorithm,
            store=f"sqlite:///{tmp_path / 'store.db'}",
            run_dir=tmp_path / "run",
            concurrency=8,
            console=False,
            plot=False,
        )
        result = trainer.fit(answer_agent, TASKS)
    assert result.totals["succeeded"] == 6

    # two rounds: the conversations before any rollout, then the kept rollouts
    messages_round, rollouts_round = algorithm.rounds
    root = tmp_path / "run" / "sft-verl"
    assert messages_round.output_dir == (root / "messages").absolute()
    assert rollouts_round.output_dir == (root / "step-1").absolute()
    # the second round continued from the first one's model
    config = OmegaConf.load(rollouts_round.output_dir / "sft_config.yaml")
    assert config.model.path == str(messages_round.hf_model)
    assert algorithm.trained_model == rollouts_round.hf_model
    # where the run stands is saved for a resume: the last step, its model, nothing pending
    state = json.loads((root / "state.json").read_text())
    assert state == {
        "step": 1,
        "messages_trained": True,
        "trained_model": str(rollouts_round.hf_model),
        "pending": 0,
    }

    # it trained on exactly the kept rollouts' token ids: the prompt read, the reply learned
    table = pq.read_table(root / "step-1" / "data.parquet").to_pylist()
    for question in ("say yes", "say yes please"):
        prompt = encode(render_chat([{"role": "user", "content": question}]))
        response = [*encode("yes"), EOS_ID]
        row = {"input_ids": prompt + response, "loss_mask": [0] * len(prompt) + [1] * 4}
        assert row in table
    assert len(table) == 2
    prompt = encode(render_chat([{"role": "user", "content": "say yes"}]))
    ids, trained = [*prompt, *encode("yes"), EOS_ID], [0] * len(prompt) + [1] * 4
    before = logprob(messages_round.hf_model, ids, trained)  # type: ignore[arg-type]
    assert logprob(rollouts_round.hf_model, ids, trained) > before  # type: ignore[arg-type]

    rows = list(agl.read_metrics(tmp_path / "run"))
    setup = next(r for r in rows if "sft/messages/steps" in r)
    assert setup["sft/messages/steps"] == 2
    assert setup["sft/messages/samples"] == 4
    step = next(r for r in rows if r.get("step") == 1 and "sft/kept_transitions" in r)
    assert step["sft/kept_transitions"] == 2
    assert step["sft/steps"] == 1
    assert step["sft/samples"] == 2


def test_a_failing_verl_run_says_why_with_its_log_and_keeps_the_data(
    tmp_path: Path, model_dir: Path, verl_on_cpu: dict[str, Any]
) -> None:
    """A data file written by hand with a row over ``data.max_length``: verl's trainer stops
    while building its dataset, and agl reports the end of verl's log."""
    import pyarrow as pa

    data = tmp_path / "hand.parquet"
    pq.write_table(pa.table({"input_ids": [[1] * 40] * 2, "loss_mask": [[1] * 40] * 2}), data)
    config = build_sft_config(
        verl_on_cpu["config"],
        model_path=str(model_dir),
        train_files=data,
        data="tokens",
        output_dir=tmp_path / "out",
        batch_size=2,
        max_length=16,
    )
    with pytest.raises(VerlSFTError, match=r"(?s)exited with code .*row 0 has 40 tokens"):
        run_verl_sft(config, env=verl_on_cpu["env"])
    assert pq.read_table(data).num_rows == 2
    assert (tmp_path / "out" / "verl_sft.log").is_file()


def test_verls_ray_sft_trainer_runs_on_a_ray_cluster(
    tmp_path: Path, model_dir: Path, verl_on_cpu: dict[str, Any]
) -> None:
    """``launcher="ray"``: verl's Ray SFT trainer, its worker group placed by Ray (a local
    cluster here; ``RAY_ADDRESS`` names a running one across nodes)."""
    run = train_sft(
        model_dir,
        output_dir=tmp_path / "sft",
        messages=CONVERSATIONS,
        sft={  # a mapping of SFTSettings' fields does as well
            "config": {**verl_on_cpu["config"], "optim.lr": 5e-3},
            "batch_size": 4,
            "max_length": 64,
            "launcher": "ray",
            "env": verl_on_cpu["env"],
        },
        progress=False,
    )
    assert run.steps == 4
    losses = [row["train/loss"] for row in run.metrics]
    assert losses[-1] < losses[0]
    assert run.hf_model is not None
    assert (run.hf_model / "model.safetensors").is_file()
    assert "TrainingWorker" in (tmp_path / "sft" / "verl_sft.log").read_text(encoding="utf-8")
