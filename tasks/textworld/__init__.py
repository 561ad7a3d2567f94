"""TextWorld (Microsoft's text-game generator) as arborl suites.

Games are generated offline with TextWorld's own challenges (`tw-make`'s generators and its
bundled Inform 7 compiler) from fixed settings and seeds, on first use, into a cache
(`games.py`); a suite is a list of such game specs (`suites.py`). The gold policy plays the
game's own walkthrough, the empty policy does nothing (`policies.py`). The game itself scores
an episode (`arborl.envs.textworld` runs it); docs/benchmarks.md has the details.
"""

from .games import CHALLENGES, GameError, TextWorldTask, ensure_game, game_metadata

__all__ = ["CHALLENGES", "GameError", "TextWorldTask", "ensure_game", "game_metadata"]
