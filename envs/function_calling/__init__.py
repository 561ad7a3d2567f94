"""arborl.envs.function_calling: `arborl/Tool-v0`, function calling scored by a verifier.

env.py (the env: task-declared tools plus python, search and final_answer), verifiers.py
(answer checks: exact, numeric, contains, user functions; a registry), search.py (the BM25
index behind the `search` tool). The Tool/ToolBox abstraction every env uses is
`arborl.envs.toolbox`.
"""

from .env import DEFAULT_TASK, ToolEnv, ToolEpisode, extract_answer
from .search import BM25
from .verifiers import VERIFIERS, get_verifier, register_verifier, score

__all__ = [
    "BM25",
    "DEFAULT_TASK",
    "VERIFIERS",
    "ToolEnv",
    "ToolEpisode",
    "extract_answer",
    "get_verifier",
    "register_verifier",
    "score",
]
