"""The agent: an inference engine driving a Gymnasium env, recorded as token-level turns.

    agent = Agent(engine, tokenizer, AgentConfig(max_turns=8, sampling=SamplingParams()))
    ep = await agent.run_episode(env, task, group_id="g0")      # -> AgentEpisode
    ep.trajectory.token_ids(), ep.trajectory.loss_mask(), ep.trajectory.behavior_logprobs()

One turn, token-in / token-out (nothing is ever re-tokenized)::

    chat.ids ──engine.generate──▶ response ids + behaviour log-probs      (loss mask 1)
             ◀─ append as sampled
    decode(response) ──env.astep──▶ observation messages, reward, info
    chat template(new messages) ──▶ observation ids                      (loss mask 0)
             ◀─ append

The loop is stepwise (`start` / `step` / `finish`) so that a trainer can pause an episode
between turns and resume it later with newer weights (partial rollouts: every token keeps
the policy version that sampled it) and so that tree rollouts can fork an episode at a turn
boundary (`fork`, by replaying the prefix's actions in a fresh env).

Budgets: `max_turns` (then the env scores the current state: `truncation="max_turns"`),
`max_new_tokens` per turn, and `max_context_tokens` for the whole sequence. With
`context="truncate"` (the default) an observation that would not leave room for a reply ends
the episode with `truncation="context_overflow"`, and is not kept; `"sliding_window"` and
`"summarize"` go on in a new context instead, each a new segment (`arborl.agents.context`,
`overflow.py`; `AgentEpisode.segments`). An env or engine error ends the episode with
`truncation="env_error"` / `"engine_error"` and `error` set; the sandbox lease always goes back.

The loop is here; what it records (`EpisodeState`, `AgentEpisode`, how an episode ends) is in
`episode.py`, and each generation's seed in `seeding.py`.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import gymnasium
from gymnasium.utils.env_checker import data_equivalence
from pydantic import BaseModel, ConfigDict, Field, model_validator

from arborl.envs import arelease, areset, astep
from arborl.envs.episodes import on_envs
from arborl.envs.spaces import observation_messages
from arborl.tasks import Policy

from .chat import TokenizedChat, check_append_only
from .context import SUMMARY_PROMPT, ContextMode, check_budget, check_prompt_fits
from .engines import Generation, InferenceEngine, SamplingParams
from .episode import (
    AgentEpisode,
    EpisodeState,
    ForkMismatch,
    end_episode,
    episode_metrics,
    episode_segments,
    observation_text,
    snapshot,
)
from .overflow import Overflow, go_on
from .seeding import GroupPlaces, generation_sampling
from .trajectory import Trajectory, Turn
from .vision import ImageEncoder, check_sees_images, is_processor

__all__ = ["Agent", "AgentConfig", "AgentEpisode", "EpisodeState", "ForkMismatch", "Gate", "observation_text"]

log = logging.getLogger(__name__)
Gate = Callable[[], Awaitable[None]]


class AgentConfig(BaseModel):
    """Budgets and sampling of an agent's episodes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_turns: int = Field(10, ge=1, description="model turns before the episode is cut (truncated)")
    max_new_tokens: int = Field(512, ge=1, description="tokens one reply may have")
    max_context_tokens: int = Field(4096, ge=2, description="prompt + every turn; beyond: truncated")
    max_response_tokens: int | None = Field(
        None, ge=1, description="everything after the prompt (replies + observations); beyond: truncated"
    )
    sampling: SamplingParams = Field(default_factory=SamplingParams, description="n is ignored (1)")
    strict_template: bool = Field(
        False, description="refuse chat templates that are not append-only instead of warning"
    )
    context: ContextMode = Field(
        "truncate",
        description="past max_context_tokens: end the episode (truncate), drop the oldest turns "
        "(sliding_window), or have the policy summarise the episode so far (summarize); "
        "each new context is a new segment",
    )
    summary_prompt: str = Field(
        SUMMARY_PROMPT, min_length=1, description="the user message asking for a summary"
    )
    summary_max_tokens: int | None = Field(
        None, ge=1, description="tokens a summary may have (max_new_tokens)"
    )

    @model_validator(mode="after")
    def _window_holds_a_reply(self) -> AgentConfig:
        check_budget(self.context, self.max_new_tokens, self.max_context_tokens)
        return self


class Agent:
    """Runs episodes of a policy (an `InferenceEngine` + its tokenizer) in Gymnasium envs."""

    def __init__(
        self,
        engine: InferenceEngine,
        tokenizer: Any,
        config: AgentConfig | None = None,
        *,
        version_offset: int = 0,
    ) -> None:
        """`version_offset` is added to the engine's weight-update count to give each token's
        policy version (a trainer that resumes at version v with a fresh engine passes v).
        A vision-language policy passes its processor as `tokenizer`: images in observations
        then go through it with their ids (`arborl.agents.vision`)."""
        self.engine = engine
        self.vision = ImageEncoder(tokenizer) if is_processor(tokenizer) else None
        self.tokenizer = tokenizer.tokenizer if self.vision is not None else tokenizer
        self.config = config or AgentConfig()
        self.version_offset = version_offset
        self._template_checked: dict[str, list[str]] = {}
        self._places = GroupPlaces()  # each group's next place, for seeded sampling

    # ---- whole episodes ----------------------------------------------------------------
    async def run_episode(
        self,
        env: gymnasium.Env,
        task: Any,
        *,
        group_id: str = "",
        seed: int | None = None,
        gate: Gate | None = None,
        demo: Policy | None = None,
    ) -> AgentEpisode:
        """Reset `env` on `task`, take turns until the episode ends, release the sandbox.

        With `demo`, the replies come from that scripted policy instead of the engine
        (demonstrations for SFT): each reply is tokenized once, EOS appended, log-probs 0,
        policy version -1, and recorded exactly like sampled turns.
        """
        state = await self.start(env, task, group_id=group_id, seed=seed)
        try:
            while not state.done:
                await self.step(state, gate=gate, demo=demo)
        except BaseException:
            await arelease(env)
            raise
        return await self.finish(state)

    async def run_episodes(
        self,
        env_factory: Callable[[], gymnasium.Env],
        tasks: Sequence[Any],
        *,
        concurrency: int = 16,
        demo: Callable[[Any], Policy] | None = None,
    ) -> list[AgentEpisode]:
        """One episode per task on `concurrency` envs made for the call (closed after); `demo`,
        a factory ``task -> policy``, replays scripted solutions instead of sampling."""
        envs = [env_factory() for _ in range(min(concurrency, len(tasks)))]

        async def episode(env: gymnasium.Env, i: int, task: Any) -> AgentEpisode:
            policy = demo(task) if demo is not None else None
            return await self.run_episode(env, task, group_id=f"eval-{i}", demo=policy)

        try:
            return await on_envs(envs, tasks, episode)
        finally:
            for env in envs:
                close = getattr(env.unwrapped, "aclose", None)
                if close is not None:
                    await close()

    async def start(
        self, env: gymnasium.Env, task: Any, *, group_id: str = "", seed: int | None = None
    ) -> EpisodeState:
        """Reset the env and render the opening messages once (the prompt ids)."""
        start = time.perf_counter()
        place = self._take_place(group_id)  # before the first await: the order calls were made in
        obs, info = await areset(env, seed=seed, options={"task": task})
        messages = list(observation_messages(obs))
        tools = info.get("tools") or None
        self._check_template(tools)
        try:
            check_sees_images(messages, self.vision, self.engine)
        except BaseException:
            await arelease(env)
            raise
        chat = TokenizedChat.start(
            self.tokenizer, messages, tools=tools, strict=self.config.strict_template, vision=self.vision
        )
        traj = Trajectory(prompt_ids=list(chat.ids), task_id=str(info.get("task_id", "")), group_id=group_id)
        traj.prompt_images = chat.prompt_images
        traj.metrics["reset_s"] = time.perf_counter() - start
        state = EpisodeState(
            env,
            task,
            chat,
            traj,
            list(messages),
            [info],
            observations=[messages],
            seed=seed,
            base=list(chat.ids),
            base_images=chat.prompt_images,
            place=place,
        )
        if self.config.context != "truncate":
            try:
                check_prompt_fits(len(chat.ids), self.config.max_context_tokens, self.config.context)
            except BaseException:
                await arelease(env)
                raise
        if len(chat.ids) >= self.config.max_context_tokens:
            await end_episode(state, truncation="context_overflow")
        return state

    def can_step(self, state: EpisodeState) -> bool:
        """Whether `step` would sample another turn (not ended, under `max_turns`): a
        state that cannot is no place to branch from."""
        return not state.done and len(state.actions) < self.config.max_turns

    async def step(
        self,
        state: EpisodeState,
        gate: Gate | None = None,
        demo: Policy | None = None,
        prefix: Turn | None = None,
    ) -> None:
        """One turn: generate a reply (or take `demo`'s), step the env, append the observation.

        With `prefix` (the first tokens of a reply sampled earlier, with their log-probs and
        versions), only the rest of the reply is generated: the turn is ``prefix + new``.
        Tree rollouts branch at uncertain tokens this way without sampling the prefix again.
        """
        if state.done:
            raise RuntimeError("the episode has ended")
        if not self.can_step(state):  # at the turn limit
            await end_episode(state, truncation="max_turns")
            return
        if gate is not None:
            await gate()  # a paused partial rollout waits here, between turns
        head = list(prefix.response_ids) if prefix else []
        budget = self._room(state) - len(head)
        room = min(self.config.max_new_tokens - len(head), budget)
        if room < 1:
            raise ValueError(f"a prefix of {len(head)} tokens leaves no room for the rest of the reply")
        sampling = self._sampling(state, room)
        try:
            if demo is not None:
                gen = await self._demonstrate(state, demo)
            else:
                gen = await self.generate(state, sampling, head)
        except Exception as e:
            log.warning("generation failed: %s: %s", type(e).__name__, e)
            await end_episode(state, truncation="engine_error", error=f"{type(e).__name__}: {e}")
            return
        await self._apply(state, gen, prefix)

    async def generate(
        self, state: EpisodeState, sampling: SamplingParams, head: Sequence[int] = ()
    ) -> Generation:
        """One generation from the episode's context (+ `head`, a reply's forced start), with
        the context's images where it shows any (text engines take none)."""
        images = state.chat.images()
        extra = {"images": [images]} if images is not None else {}
        return (await self.engine.generate([state.chat.ids + list(head)], sampling, **extra))[0]

    def snapshot(self, state: EpisodeState) -> EpisodeState:
        """A copy of the episode's record without its env, to fork later (`fork`)."""
        return snapshot(state)

    async def finish(self, state: EpisodeState) -> AgentEpisode:
        """Give the sandbox back and package the episode."""
        if not state.done:
            await end_episode(state, truncation="stopped")
        await arelease(state.env)
        segments = episode_segments(state)
        traj = segments[-1]
        traj.metrics.update(episode_metrics(segments, state.infos))
        return AgentEpisode(traj, state.messages, state.infos, state.error, segments)

    async def fork(self, state: EpisodeState, env: gymnasium.Env) -> EpisodeState:
        """A copy of a running episode in `env` (a fresh env of the same kind): reset on the
        same task and seed, then replay the prefix's actions. The copy shares the prefix's
        `Turn` objects (their tokens were sampled once) and continues on its own.

        Raises `ForkMismatch` if the replayed env answers differently (a nondeterministic env
        cannot be forked by replay)."""
        place = self._take_place(state.trajectory.group_id)  # before the first await, as start's
        obs, _ = await areset(env, seed=state.seed, options={"task": state.task})
        replayed = [list(observation_messages(obs))]
        for i, action in enumerate(state.actions):
            obs, _, terminated, truncated, _ = await astep(env, action)
            if terminated or truncated:
                raise ForkMismatch(f"the replayed episode ended at action {i}; it did not the first time")
            replayed.append(list(observation_messages(obs)))
        for i, (seen, again) in enumerate(zip(state.observations, replayed, strict=True)):
            if not data_equivalence(seen, again, exact=True):  # messages may hold pixel arrays
                raise ForkMismatch(f"observation {i} differs on replay: the env is not deterministic")
        copied = self.snapshot(state)
        copied.env, copied.place = env, place
        return copied

    def _take_place(self, group_id: str) -> int:
        """The next place in group `group_id` (0 for its first episode)."""
        return self._places.take(group_id)

    # ---- internals --------------------------------------------------------------------
    async def _demonstrate(self, state: EpisodeState, demo: Policy) -> Generation:
        start = time.perf_counter()
        reply = demo(list(state.messages), dict(state.infos[-1]))
        text = await reply if inspect.isawaitable(reply) else reply
        eos = self.tokenizer.eos_token_id
        ids = list(self.tokenizer.encode(str(text), add_special_tokens=False)) + (
            [eos] if eos is not None else []
        )
        return Generation(
            prompt_index=0,
            token_ids=ids,
            logprobs=[0.0] * len(ids),
            finish_reason="stop",
            num_prompt_tokens=len(state.chat.ids),
            latency_s=time.perf_counter() - start,
            weights_version=-1 - self.version_offset,  # version -1: a demonstration, no policy sampled it
        )

    async def _apply(self, state: EpisodeState, gen: Generation, prefix: Turn | None = None) -> None:
        """Record the reply (after `prefix`, if any) as a turn, step the env with its text,
        append the observation."""
        head = prefix or Turn([], [])
        ids = list(head.response_ids) + list(gen.token_ids)
        turn = Turn(
            response_ids=ids,
            response_logprobs=list(head.response_logprobs) + [float(x) for x in gen.logprobs],
            policy_versions=list(head.policy_versions or [-1] * len(head.response_ids))
            + [self.version_offset + v for v in gen.versions],
            response_entropies=(
                list(head.response_entropies) + list(gen.entropies)
                if gen.entropies and len(head.response_entropies) == len(head.response_ids)
                else []
            ),
            finish_reason=gen.finish_reason,
            gen_s=gen.latency_s,
            # the state the reply was made in: reset's, or the last step's (GiGPO's anchor)
            anchor_state_hash=str(state.infos[-1].get("state_hash", "")),
            anchor_observation=observation_text(state.observations[-1]),
        )
        state.chat.append_response(ids)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        state.trajectory.turns.append(turn)
        state.actions.append(text)
        state.messages.append({"role": "assistant", "content": text})
        start = time.perf_counter()
        try:
            obs, reward, terminated, truncated, info = await astep(state.env, text)
        except Exception as e:  # envs turn model errors into observations; this is an env bug
            log.warning("env step failed: %s: %s", type(e).__name__, e)
            turn.env_s = time.perf_counter() - start
            await end_episode(
                state, truncation="env_error", error=f"{type(e).__name__}: {e}", finish_env=False
            )
            return
        turn.env_s = time.perf_counter() - start
        turn.reward = float(reward)
        turn.env_state_hash = str(info.get("state_hash", ""))
        label = info.get("step_label")
        turn.step_label = None if label is None else float(label)
        calls = info.get("tool_calls") or []
        turn.tool_call_ok = all(c.get("ok") for c in calls) if calls else None
        state.infos.append(info)
        msgs = list(observation_messages(obs))
        state.messages.extend(msgs)
        state.observations.append(msgs)
        check_sees_images(msgs, self.vision, self.engine)
        if terminated or truncated:
            reason = None if terminated else str(info.get("truncated_by") or "env")
            await end_episode(state, truncation=reason, terminated=bool(terminated), finish_env=False)
            return
        added = state.chat.append_messages(msgs)
        if self._room(state) < (1 if self.config.context == "truncate" else self.config.max_new_tokens):
            # No room left for a reply: the observation is not kept (the model never saw it).
            del state.chat.ids[len(state.chat.ids) - len(added) :]
            images = state.chat.last_images
            if images is not None:  # nor are its images
                state.chat.appended_images.pop()
            if self.config.context == "truncate":
                await end_episode(state, truncation="context_overflow")
            else:
                await go_on(self, state, Overflow(turn, msgs, added, images))
            return
        turn.observation_ids = added
        turn.observation_images = state.chat.last_images
        state.window.append((ids, added))
        state.window_images.append(state.chat.last_images)

    def _sampling(self, state: EpisodeState, room: int) -> SamplingParams:
        """The sampling of the episode's next generation, seeded per call and per place in the
        group when the config is (`arborl.agents.seeding`)."""
        return generation_sampling(self.config.sampling, state, room)

    def _room(self, state: EpisodeState) -> int:
        """Tokens the episode may still add (context and response budgets)."""
        room = self.config.max_context_tokens - len(state.chat.ids)
        if self.config.max_response_tokens is not None:
            used = len(state.chat.ids) - len(state.trajectory.prompt_ids)
            room = min(room, self.config.max_response_tokens - used)
        return room

    def _check_template(self, tools: Any) -> None:
        key = "tools" if tools else "plain"
        if key not in self._template_checked:
            problems = check_append_only(self.tokenizer, tools)
            self._template_checked[key] = problems
            if problems:
                log.warning(
                    "the chat template is not append-only (%s); arborl trains on the exact ids the "
                    "model saw, but applying this template to the full history would differ",
                    "; ".join(problems),
                )
