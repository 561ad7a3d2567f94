"""arborl inside verl: an `AgentLoopBase` that runs arborl envs for verl's own PPO trainer.

verl's trainer (Ray; FSDP/Megatron actors; vLLM/SGLang servers) calls one agent loop per
sample. Registered as ``arborl_agent``, this loop runs an arborl episode (or one leaf of a
rollout tree) with verl's LLM server client as the inference engine, and hands verl the
token-exact sequence arborl recorded::

    verl AgentLoopWorker ──run(sampling_params, raw_prompt, task, uid, ...)──▶ ArborlAgentLoop
        Agent(VerlServerEngine(server_manager)) × gymnasium.make(arborl.env_id)
    ◀── AgentLoopOutput(prompt_ids, response_ids, response_mask, response_logprobs,
                        reward_score, extra_fields: turn_scores + the per-turn fields of
                        `arborl.trainer.dataproto` (anchor_state_hashes, tree_paths, ...))

The per-turn fields are the ones arborl's own batches carry (`trajectories_to_dataproto`), under
the same names, so an estimator that reads one (``gigpo``: ``anchor_state_hashes``, ``tree``:
``tree_paths``) finds it in verl's ``non_tensor_batch`` too; `arborl.trainer.verl.credit`
passes it on in verl's driver.

Configuration (`trainer/verl/arborl_ppo.yaml` ships a complete one): verl's
``actor_rollout_ref.rollout.agent.default_agent_loop: arborl_agent`` and an ``arborl:``
section, typed by `arborl.trainer.verl.config.ArborlSection` (env_id, env_kwargs, task_key,
max_turns, max_new_tokens, tree, credit_log, pool; unknown keys are errors), plus the
top-level ``sandbox`` (where sandboxed envs run: ``sandbox=ray|docker|bwrap|auto``, a
registered backend's config; null: the envs' default), set once per worker.

A vision-language policy (verl's ``processor`` set: a Qwen2-VL / Qwen2.5-VL checkpoint) runs
on image envs as on text ones: the agent reads observations through the processor, each
request hands the server the pictures of its prompt (``image_data``, as verl's own tool agent
loop does), and the output's ``multi_modal_data["images"]`` are the episode's pictures, from
which verl's worker rebuilds ``multi_modal_inputs`` and the M-RoPE positions with its own
processor (the same pixels arborl's processor made: tested).

With ``tree`` set, the ``rollout.n`` calls for one prompt (same ``uid``) share one tree: the
first call grows it with ``n`` leaves, every call returns one leaf. All ``n`` samples of a
prompt must reach the same worker (verl keeps them contiguous; make the batch divisible).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from typing import Any

import gymnasium
from omegaconf import DictConfig, OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

import arborl.envs  # noqa: F401 - registers the arborl/* env ids
from arborl.agents import Agent, AgentConfig, Trajectory
from arborl.agents.engines import EngineError, Generation, InferenceEngine, SamplingParams
from arborl.agents.tree_rollout import TreeConfig, TreeRollout
from arborl.agents.vision import ImageInputs
from arborl.envs.event_loop import configure
from arborl.trainer.verl.config import ArborlSection


class VerlServerEngine(InferenceEngine):
    """verl's LLM server client (``server_manager.generate(request_id, prompt_ids=...,
    sampling_params=...) -> TokenOutput``) as an arborl `InferenceEngine`.

    Requests of one episode share a request id prefix, so verl's sticky sessions keep them on
    one server (prefix caching). Weights are verl's business: its trainer syncs its servers.
    With `accepts_images` (a VLM: verl gave the loop a processor) a prompt's images go with it
    as ``image_data``, the pictures they were made from, since the server runs its own processor.
    """

    kind = "verl"

    def __init__(
        self, server_manager: Any, eos_ids: Sequence[int] = (), accepts_images: bool = False
    ) -> None:
        self.server = server_manager
        self.eos_ids = set(eos_ids)
        self.session = uuid.uuid4().hex
        self.accepts_images = accepts_images

    async def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, images: Sequence[Any] | None = None
    ) -> list[Generation]:
        if images is not None and not self.accepts_images:
            raise EngineError("verl's server was started without a processor: it takes no images")
        shown = list(images) if images is not None else [None] * len(prompts)
        jobs = [
            self._one(i, j, list(p), sampling, shown[i])
            for i, p in enumerate(prompts)
            for j in range(sampling.n)
        ]
        return list(await asyncio.gather(*jobs))

    async def _one(
        self, i: int, j: int, prompt: list[int], sampling: SamplingParams, images: ImageInputs | None = None
    ) -> Generation:
        params = {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k or -1,
            "logprobs": True,
            "max_tokens": sampling.max_new_tokens,
        }
        extra = {"image_data": images.pil_images("verl's server")} if images is not None else {}
        out = await self.server.generate(
            request_id=self.session, prompt_ids=prompt, sampling_params=params, **extra
        )
        if out.log_probs is None:
            raise EngineError(
                "verl's server returned no log-probs: set actor_rollout_ref.rollout.calculate_log_probs=true"
            )
        ids = list(out.token_ids)
        ended = bool(ids) and ids[-1] in self.eos_ids
        finish = "length" if len(ids) >= sampling.max_new_tokens and not ended else "stop"
        return Generation(
            prompt_index=i,
            sample_index=j,
            token_ids=ids,
            logprobs=[float(x) for x in out.log_probs],
            finish_reason=finish,
            num_prompt_tokens=len(prompt),
        )

    async def update_weights(self, weights: Any) -> None:
        raise EngineError("verl's trainer syncs its servers' weights itself; arborl does not push them here")

    async def close(self) -> None:
        return None


# The sandbox config this worker process's envs were pointed at (empty: not yet, or the default).
_SANDBOX: dict[str, Any] = {}


def configure_sandboxes(config: Any) -> None:
    """Point this worker process's sandboxed envs at verl's top-level `sandbox` config (the
    `sandbox` group of cli/conf: `sandbox=ray` gives a `RaySandboxPool`, which places on the
    worker's own node first) with `arborl.pool` as its pool; once, before the first env."""
    sandbox = config.get("sandbox")
    if sandbox is None or _SANDBOX:
        return
    backend = OmegaConf.to_container(sandbox, resolve=True) if isinstance(sandbox, DictConfig) else sandbox
    assert isinstance(backend, dict)
    configure(backend=backend, pool=ArborlSection.of(config).pool)
    _SANDBOX.update(backend)


# The trees being grown in this worker, by uid: the first sample of a prompt starts one.
_TREES: dict[str, tuple[asyncio.Task[list[Trajectory]], list[int]]] = {}


@register("arborl_agent")
class ArborlAgentLoop(AgentLoopBase):
    """One sample of verl's batch: an arborl episode, or one leaf of a shared rollout tree."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arborl = ArborlSection.of(self.config)
        configure_sandboxes(self.config)
        self.prompt_length = self.rollout_config.prompt_length
        self.response_length = self.rollout_config.response_length

    def _agent(self, sampling_params: dict[str, Any]) -> Agent:
        eos = self.tokenizer.eos_token_id
        processor = vlm_processor(self)
        engine = VerlServerEngine(
            self.server_manager, [eos] if eos is not None else [], accepts_images=processor is not None
        )
        top_k = int(sampling_params.get("top_k") or 0)
        sampling = SamplingParams(
            temperature=float(sampling_params.get("temperature", 1.0)),
            top_p=float(sampling_params.get("top_p", 1.0)),
            top_k=max(0, top_k),
        )
        config = AgentConfig(
            max_turns=self.arborl.max_turns,
            # per turn; the whole response (all turns and tool results) is cut at response_length
            max_new_tokens=self.arborl.max_new_tokens or self.response_length,
            max_context_tokens=self.prompt_length + self.response_length,
            sampling=sampling,
        )
        # a VLM's agent reads its observations through the processor (arborl.agents.vision)
        return Agent(engine, processor or self.tokenizer, config)

    def _env(self) -> gymnasium.Env:
        return gymnasium.make(self.arborl.env_id, **self.arborl.env_kwargs)

    def _task(self, kwargs: dict[str, Any]) -> Any:
        key = self.arborl.task_key
        task = kwargs.get(key)
        if task is None:
            task = (kwargs.get("extra_info") or {}).get(key)
        if task is None:
            raise ValueError(
                f"the sample has no {key!r} column (nor extra_info.{key}): which task should run?"
            )
        if isinstance(task, str):
            return json.loads(task)  # datasets keep tasks as JSON text
        return dict(task) if hasattr(task, "keys") else task

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        agent, task = self._agent(sampling_params), self._task(kwargs)
        tree = self.arborl.tree
        if tree:
            traj = await self._tree_leaf(
                agent,
                task,
                str(kwargs.get("uid", "")),
                tree.model_copy(update={"leaves": self.rollout_config.n}),
            )
            gen_s = sum(t.gen_s for t in traj.turns)
            env_s = sum(t.env_s for t in traj.turns)
        else:
            ep = await agent.run_episode(self._env(), task, group_id=str(kwargs.get("uid", "")))
            traj, gen_s, env_s = ep.trajectory, ep.trajectory.metrics["gen_s"], ep.trajectory.metrics["env_s"]
        return self._output(traj, gen_s, env_s)

    async def _tree_leaf(self, agent: Agent, task: Any, uid: str, config: TreeConfig) -> Trajectory:
        if not uid:
            raise ValueError("tree rollouts need the sample's uid (verl sets it) to find its siblings")
        if uid not in _TREES:
            grow = TreeRollout(agent, self._env, config).run(task, group_id=uid)
            _TREES[uid] = (asyncio.ensure_future(_leaves(grow)), [0])
        future, taken = _TREES[uid]
        index = taken[0]
        taken[0] += 1
        if taken[0] == config.leaves:
            del _TREES[uid]  # every sibling has its leaf: forget the tree
        leaves = await future
        if index >= len(leaves):
            raise RuntimeError(f"prompt {uid}: more samples than the tree's {len(leaves)} leaves")
        return leaves[index]

    def _output(self, traj: Trajectory, gen_s: float, env_s: float) -> AgentLoopOutput:
        check_prompt_fits(len(traj.prompt_ids), self.prompt_length, traj.task_id)
        start, r = len(traj.prompt_ids), self.response_length
        ids, mask, logp = traj.token_ids(), traj.loss_mask(), traj.behavior_logprobs()
        turns = _mask_runs(mask[start:][:r])  # turns that survive the cut to response_length
        pictures = kept_pictures(traj, ids[: start + r].tolist(), vlm_processor(self))
        return AgentLoopOutput(
            prompt_ids=traj.prompt_ids,
            response_ids=ids[start:][:r].tolist(),
            response_mask=mask[start:][:r].astype(int).tolist(),
            response_logprobs=logp[start:][:r].tolist(),
            reward_score=traj.outcome_reward,
            num_turns=1 + 2 * len(traj.turns),
            multi_modal_data={"images": pictures} if pictures else None,
            metrics=AgentLoopMetrics(generate_sequences=gen_s, tool_calls=env_s),
            extra_fields={
                "turn_scores": [t.reward for t in traj.turns][:turns],
                "tool_rewards": [],
                **{k: list(v)[:turns] for k, v in turn_fields(traj).items()},
                "arborl_truncation": traj.truncation or "",
            },
        )


def vlm_processor(loop: AgentLoopBase) -> Any:
    """The multimodal processor verl gave the loop (a VLM's), or None (a text model)."""
    return getattr(loop, "processor", None)


def kept_pictures(traj: Trajectory, kept_ids: Sequence[int], processor: Any) -> list[Any]:
    """The pictures (PIL) of the images whose placeholders are in `kept_ids` (the sequence as
    cut to response_length), in order: what verl's worker runs its processor on to rebuild the
    row's ``multi_modal_inputs``. A cut through an image's placeholders is an error: verl's
    processor would find fewer placeholder tokens than the image has."""
    images = traj.images()
    if images is None:
        return []
    if processor is None:
        raise EngineError("a trajectory with images, and verl gave this agent loop no processor")
    image_token = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    merge = int(processor.image_processor.merge_size) ** 2
    sizes = [int(g.prod()) // merge for g in images.image_grid_thw]
    shown = sum(1 for t in kept_ids if t == image_token)
    ends = [sum(sizes[: k + 1]) for k in range(len(sizes))]
    if shown > ends[-1]:
        # more placeholders than images: the policy sampled one (a server that does not take
        # the vision ids out of its sampling, as the transformers engine does); the pixels
        # would be misaligned, so the episode is refused rather than trained on
        raise EngineError(
            f"task {traj.task_id}: the sequence holds {shown} image placeholders for "
            f"{ends[-1]} images' worth: the policy sampled a vision placeholder id"
        )
    whole = sum(1 for e in ends if e <= shown)
    if shown != (ends[whole - 1] if whole else 0):
        raise ValueError(
            f"task {traj.task_id}: rollout.response_length cuts the episode inside an image's "
            "placeholder tokens; raise response_length (or lower the env's image size or turns)"
        )
    return images.pil_images(f"task {traj.task_id}")[:whole]


def check_prompt_fits(n_tokens: int, prompt_length: int, task_id: str) -> None:
    """verl left-pads every prompt to `data.max_prompt_length` and cannot cut one (a longer one
    fails deep in its batch collation with a size mismatch); an env's first observation is the
    prompt here, so say which setting to raise."""
    if n_tokens > prompt_length:
        raise ValueError(
            f"task {task_id!r}: the env's first observation is {n_tokens} tokens, over verl's "
            f"data.max_prompt_length={prompt_length}; raise data.max_prompt_length to at least {n_tokens}"
        )


def turn_fields(traj: Trajectory) -> dict[str, Any]:
    """The per-turn fields `arborl.trainer.dataproto` gives a trajectory's row (one entry per turn):
    taken from the batch builder itself, so the names and contents never drift apart."""
    from arborl.trainer.dataproto import turn_columns

    return {k: v[0] for k, v in turn_columns([traj]).items()}


def _mask_runs(mask: Any) -> int:
    """How many runs of 1s (model turns) a loss mask holds."""
    m = [int(x) for x in mask]
    return sum(1 for i, x in enumerate(m) if x and (i == 0 or not m[i - 1]))


async def _leaves(grow: Any) -> list[Trajectory]:
    return (await grow).leaves
