"""ScienceWorld (Wang et al., 2022): 30 elementary-science task types in a text simulator,
each with many variations split into train/dev/test by the package itself.

    task.py        the ScienceWorldTask type, the task catalogue and the suites' loaders
    variations.py  the package's own train/dev/test variation lists (snapshot + its generator)
    grading.py     the game's score as arborl's reward and success (pure)
    gold.py        the gold policy (the package's gold action sequence) and the empty policy
    suites.py      `scienceworld-<task>` per task type, `scienceworld` over all of them
    data/          variations.json, written by `python -m arborl.tasks.scienceworld.variations`

The env that runs them is `arborl.envs.scienceworld` (a pool of the simulator's JVMs).
"""

from .grading import episode_reward, is_success
from .task import ScienceWorldTask, load_task_type, task_names, task_types

__all__ = ["ScienceWorldTask", "episode_reward", "is_success", "load_task_type", "task_names", "task_types"]
