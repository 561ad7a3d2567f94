"""An engine that replies with fixed text, scored by the real tiny model: for tests of
harnesses whose replies the untrained tiny model cannot write (a tool call, a command), with
log-probs as the transformers engine would report them for those tokens."""

from __future__ import annotations

from arborl.agents.engines import Generation, InferenceEngine
from arborl.agents.engines.scoring import score_tokens


class Scripted(InferenceEngine):
    """Each call's reply is the next of `replies` (+ EOS); `calls` records (prompt, ids, logprobs)."""

    def __init__(self, hf, tok, replies):
        self.hf, self.tok, self.replies, self.calls = hf, tok, list(replies), []

    async def generate(self, prompts, sampling):
        ids = [*self.tok.encode(self.replies.pop(0), add_special_tokens=False), self.tok.eos_token_id]
        lps = score_tokens(self.hf.model, prompts[0], ids).tolist()
        self.calls.append((list(prompts[0]), ids, lps))
        return [Generation(prompt_index=0, token_ids=ids, logprobs=lps, finish_reason="stop",
                           num_prompt_tokens=len(prompts[0]))]  # fmt: skip

    async def update_weights(self, weights):
        raise NotImplementedError

    async def close(self):
        pass
