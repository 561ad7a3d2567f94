"""The tiny model's tokenizer and engines, shared by the agent and engine tests."""

from __future__ import annotations

import pytest
from agent_helpers import Recording
from transformers import AutoTokenizer

from arborl.agents.engines import HFEngineConfig, make_engine


@pytest.fixture(scope="module")
def tok(tiny_model):
    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="module")
def hf(tiny_model):
    """The transformers engine on the tiny model: the scoring reference of other engines."""
    return make_engine(HFEngineConfig(model=str(tiny_model)))


@pytest.fixture
def engine(tiny_model):
    """A fresh transformers engine on the tiny model that records what it consumed and produced."""
    return Recording(make_engine(HFEngineConfig(model=str(tiny_model))))
