"""Web tasks on self-hosted sites (`web-mini`) and MiniWoB++ pages (`web-miniwob`).

    task.py      the WebTask type, its checks, the JSON loader and the scripted (gold) policy
    miniwob.py   MiniWoB++ pages as tasks, their scripted solutions
    suites.py    their registration
    data/        web-mini's task files

The env that runs them is `arborl.envs.web` (a browser, the sites, the checks).
"""

from .task import (
    WEB_MINI_DIR,
    AnswerCheck,
    PageCheck,
    StateCheck,
    Target,
    UrlCheck,
    WebStep,
    WebTask,
    find_element,
    load_web_mini,
    load_web_task,
    load_web_tasks,
    scripted_policy,
    site_host,
    step_to_action,
)

__all__ = [
    "WEB_MINI_DIR",
    "AnswerCheck",
    "PageCheck",
    "StateCheck",
    "Target",
    "UrlCheck",
    "WebStep",
    "WebTask",
    "find_element",
    "load_web_mini",
    "load_web_task",
    "load_web_tasks",
    "scripted_policy",
    "site_host",
    "step_to_action",
]
