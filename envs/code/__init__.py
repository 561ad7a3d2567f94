"""arborl.envs.code: `arborl/Code-v0`, SWE-style repository repair in a sandbox.

env.py (the env: the task's repository in a sandbox, the verifier, the state hash),
tools.py (its tools: bash, str_replace_editor, run_tests, submit).
"""

from .env import DEFAULT_TASK, CodeEnv, repo_files
from .tools import code_tools, workspace_tools

__all__ = ["DEFAULT_TASK", "CodeEnv", "code_tools", "repo_files", "workspace_tools"]
