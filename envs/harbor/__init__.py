"""arborl.envs.harbor: `arborl/Harbor-v0`, Harbor / Terminal-Bench task folders in sandboxes.

env.py (the env: the task's image, the agent's tools, grading at the end), grading.py (the
tests run out of the agent's reach, the reward read by the host), images.py (Dockerfiles built
on the offline base), uv_layer.py (uv for tests that run it, offline and out of the agent's
reach), benchmark.py (how `arborl eval` prepares and grades a Harbor suite).
The task folders themselves are read by `arborl.tasks.harbor`.
"""

from .env import HarborEnv
from .grading import TestRun, parse_reward_json, parse_reward_txt, run_tests
from .images import HarborImageError, TaskImage, build_task_image

__all__ = [
    "HarborEnv",
    "HarborImageError",
    "TaskImage",
    "TestRun",
    "build_task_image",
    "parse_reward_json",
    "parse_reward_txt",
    "run_tests",
]
