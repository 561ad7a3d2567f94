"""OSWorld: its task format, the loader, the download cache, and the `desktop-mini` suite.

    task.py       DesktopTask and its parts; the checks that need no desktop; `DesktopSupport`,
                  what a desktop says it can run
    loader.py     task files and folders → DesktopTasks, refusing what cannot run, with the reason
    root.py       tasks that need root (the desktop sandbox gives none)
    cache.py      where `download` steps and `cloud_file` getters find their files
    fetch.py      `python -m arborl.tasks.osworld.fetch`: fill that cache on a host with network
    policies.py   a gold script replayed; giving up
    mini.py       desktop-mini (data/desktop-mini/)
    user.py       a user's task files as a suite
    suites.py     the registration

The env that runs them, with what it can run (`support.py`), is `arborl.envs.desktop`.
"""

from .cache import (
    DOWNLOAD_CACHE_ENV,
    cached_cloud_file,
    cached_download,
    default_download_cache,
    getter_files,
)
from .loader import GOLD_FILE, check_task, load_osworld_dir, load_osworld_task
from .policies import ScriptedDesktopPolicy
from .task import (
    GUI_IMAGE,
    RESULT_ONLY_METRICS,
    DesktopSupport,
    DesktopTask,
    OSWorldEvaluator,
    OSWorldGetter,
    OSWorldStep,
    TaskNeedsRoot,
    UnsupportedOSWorldFeature,
    resolve_local,
)

__all__ = [
    "DOWNLOAD_CACHE_ENV",
    "GOLD_FILE",
    "GUI_IMAGE",
    "RESULT_ONLY_METRICS",
    "DesktopSupport",
    "DesktopTask",
    "OSWorldEvaluator",
    "OSWorldGetter",
    "OSWorldStep",
    "ScriptedDesktopPolicy",
    "TaskNeedsRoot",
    "UnsupportedOSWorldFeature",
    "cached_cloud_file",
    "cached_download",
    "check_task",
    "default_download_cache",
    "getter_files",
    "load_osworld_dir",
    "load_osworld_task",
    "resolve_local",
]
