"""The Sokoban suite (`arborl.tasks.suites` imports this module to register it)."""

from ..suites import Suite, register_suite
from .task import MAX_STEPS

register_suite(
    Suite(
        "sokoban-6x6",
        "arborl/Sokoban-v0",
        "arborl.tasks.sokoban.suite:load_suite",
        description="100 seeded 6x6 one-box rooms as verl-agent and RAGEN play them (text grid, "
        "verl-agent's prompt and reward), each solved by a BFS solver",
        gold="arborl.tasks.sokoban.suite:gold_policy",
        empty="arborl.tasks.sokoban.suite:empty_policy",
        max_turns=MAX_STEPS,
        tags=("game", "multi-turn"),
    )
)
