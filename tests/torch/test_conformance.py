"""agl-torch passes the suites: its algorithms the algorithm suite, its policy server the
gateway's wires suite."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import agl
from agl.testing.algorithm import AlgorithmConformance, llm_agent
from agl.testing.gateway_wires import GatewayWiresConformance
from agl_torch.rl import LightningRLTorch
from agl_torch.server import PolicyServer
from agl_torch.settings import CheckpointSettings
from agl_torch.sft import SFTTorch


class TestLightningRLTorch(AlgorithmConformance):
    plugin_name = "lightningrl-torch"

    @pytest.fixture
    def algorithm_factory(self, tiny_model_dir: Path) -> Callable[[], agl.Algorithm]:
        return lambda: LightningRLTorch(
            tiny_model_dir,
            loop=agl.LoopSettings(n_samples=2, batch_size=5),
            sampling=agl.SamplingSettings(max_tokens=8),
            checkpoints=CheckpointSettings(every=0),
        )

    @pytest.fixture
    def agent(self) -> agl.LitAgent:
        return llm_agent()


class TestSFTTorch(AlgorithmConformance):
    plugin_name = "sft-torch"

    @pytest.fixture
    def algorithm_factory(self, tiny_model_dir: Path) -> Callable[[], agl.Algorithm]:
        return lambda: SFTTorch(
            tiny_model_dir,
            min_reward=0.0,
            loop=agl.LoopSettings(n_samples=2, batch_size=5),
            sampling=agl.SamplingSettings(max_tokens=8),
            checkpoints={"every": 0},  # a mapping of the fields does as well
        )

    @pytest.fixture
    def agent(self) -> agl.LitAgent:
        return llm_agent()


class TestPolicyServerWires(GatewayWiresConformance):
    """Every wire through agl's gateway in front of agl-torch's policy server (the tiny model):
    the ids on the record are a real tokenizer's, rendered by the model's own chat template."""

    model = "policy"

    @pytest.fixture(scope="class")
    @classmethod
    def engine(cls, tiny_model_dir: Path) -> Iterator[str]:
        with PolicyServer(tiny_model_dir) as server:
            yield server.url
