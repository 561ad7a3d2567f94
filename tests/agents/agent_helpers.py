"""Helpers of the agent tests: a recording engine and an agent over it."""

from __future__ import annotations

from arborl.agents import Agent, AgentConfig
from arborl.agents.engines import InferenceEngine, SamplingParams


class Recording(InferenceEngine):
    """The real engine, with every prompt it received and every response it gave kept."""

    def __init__(self, inner: InferenceEngine) -> None:
        self.inner, self.calls = inner, []

    @property
    def accepts_images(self):
        return self.inner.accepts_images

    async def generate(self, prompts, sampling, **images):
        out = await self.inner.generate(prompts, sampling, **images)
        self.calls += [(list(prompts[g.prompt_index]), list(g.token_ids), list(g.logprobs)) for g in out]
        return out

    async def update_weights(self, weights):
        await self.inner.update_weights(weights)

    async def close(self):
        await self.inner.close()


def agent_for(engine, tok, **config):
    sampling = SamplingParams(temperature=1.0)  # unseeded: forks must not repeat each other
    return Agent(engine, tok, AgentConfig(sampling=sampling, **{"max_new_tokens": 24, **config}))
