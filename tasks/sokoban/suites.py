"""The Sokoban suites (`arborl.tasks.suites` imports this module to register them)."""

from ..suites import Suite, register_suite
from .task import MAX_STEPS

_ROOMS = dict(
    loader="arborl.tasks.sokoban.suite:load_suite",
    gold="arborl.tasks.sokoban.suite:gold_policy",
    empty="arborl.tasks.sokoban.suite:empty_policy",
    max_turns=MAX_STEPS,
    tags=("game", "multi-turn"),
)

register_suite(
    Suite(
        "sokoban-6x6",
        "arborl/Sokoban-v0",
        description="100 seeded 6x6 one-box rooms as verl-agent and RAGEN play them (text grid, "
        "verl-agent's prompt and reward), each solved by a BFS solver",
        **_ROOMS,
    )
)
register_suite(
    Suite(
        "sokoban-6x6-chat",
        "arborl/SokobanChat-v0",
        description="sokoban-6x6's rooms and reward for a harness that keeps the chat: verl-agent's "
        "first prompt, then each new board alone",
        **_ROOMS,
    )
)
register_suite(
    Suite(
        "sokoban-6x6-image",
        "arborl/Sokoban-v0",
        description="sokoban-6x6's rooms and reward shown as pictures (obs_type=image): verl-agent's "
        "visual Sokoban, for a vision-language policy",
        env_kwargs={"obs_type": "image"},
        **{**_ROOMS, "tags": (*_ROOMS["tags"], "vision")},
    )
)
