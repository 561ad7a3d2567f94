"""arborl.envs.desktop: `arborl/Desktop-v0`, OSWorld-style desktop tasks on Xvfb in a container.

    env = gymnasium.make("arborl/Desktop-v0")
    obs, info = env.reset(options={"task": arborl.tasks.osworld.load_osworld_task("task.json", support=DESKTOP)})
    obs["screenshot"], obs["messages"], info["windows"]
    obs, reward, terminated, truncated, info = env.step("```python\\npyautogui.hotkey('ctrl', 's')\\n```")

- `actions.py`   pyautogui-style replies → validated actions → xdotool command lines
- `screen.py`    the X display in the sandbox: start, act, screenshot, window list
- `steps.py`     OSWorld setup steps (config / postconfig)
- `evaluators.py` OSWorld getters and the evaluation logic
- `osworld_metrics.py` OSWorld's metrics by name (`METRIC_FUNCS`); `os_metrics.py` the `os` domain's and `multi_apps`'
- `support.py`   what the env can run (steps, getters, metrics, apps): `DESKTOP`, the loader's `support`
- `env.py`       the Gymnasium env
"""

from .actions import Action, ActionError, parse_actions, to_commands
from .env import DEFAULT_TASK, DesktopEnv
from .evaluators import evaluate
from .osworld_metrics import METRIC_FUNCS
from .screen import DisplayError, Screen, Window, XDisplay
from .steps import DesktopSetupError
from .support import DESKTOP

__all__ = [
    "DEFAULT_TASK",
    "DESKTOP",
    "METRIC_FUNCS",
    "Action",
    "ActionError",
    "DesktopEnv",
    "DesktopSetupError",
    "DisplayError",
    "Screen",
    "Window",
    "XDisplay",
    "evaluate",
    "parse_actions",
    "to_commands",
]
