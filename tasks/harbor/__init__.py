"""Harbor (Terminal-Bench 2) task folders as arborl tasks: `arborl eval suite=FOLDER`.

    config.py      task.toml as a pydantic model (Harbor's fields, unknown keys refused)
    task.py        HarborTask, and where Harbor puts tests, solution and reward in the container
    reader.py      folders → tasks (a broken folder carries its error; the others load)
    dockerfile.py  environment/Dockerfile mapped onto arborl's offline base (pure: no Docker)
    uv_plan.py     what tests/test.sh needs of uv, so the image can give it offline (pure)
    policies.py    gold (solution/solve.sh with the env's bash tool) and empty
    user.py        the suite of a folder

The env that runs them, builds their images and grades them is `arborl.envs.harbor`.
"""

from .config import TaskConfig, TaskConfigError
from .dockerfile import DockerfilePlan, map_dockerfile
from .reader import HarborTaskError, has_tasks, load_task, load_tasks, read_files
from .task import REWARD_JSON, REWARD_TXT, TESTS_DIR, VERIFIER_LOGS, HarborTask
from .user import harbor_suite

__all__ = [
    "REWARD_JSON",
    "REWARD_TXT",
    "TESTS_DIR",
    "VERIFIER_LOGS",
    "DockerfilePlan",
    "HarborTask",
    "HarborTaskError",
    "TaskConfig",
    "TaskConfigError",
    "harbor_suite",
    "has_tasks",
    "load_task",
    "load_tasks",
    "map_dockerfile",
    "read_files",
]
