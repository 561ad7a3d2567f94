"""SWE-bench tasks: the instance format, loaders, instance-image recipes, the conversion into
the `CodeTask` that `arborl/Code-v0` runs, the evaluation harness run in sandboxes, and the
grade read from its log.

    from arborl.tasks.swebench import load_instances, to_code_task
    instances = load_instances("swe-bench-lite.jsonl")          # or a save_to_disk directory
    task = to_code_task(instances[0], image=tag)                 # or repo_files={...}

`grading.py` the grade (`SWEGrade`), `policies.py` the gold and empty policies, `mini/` and
`real/` the swe-mini and swe-real suites (`suites.py` registers them), `user.py` a user's
instances as a suite. Imports nothing else of arborl: what needs a sandbox is the code env's
(`arborl.envs.code.swe_grading`, `arborl.envs.code.instance_images`), and image builds take the layer
builder as an argument.
"""

from .convert import apply_command, swe_parts, to_code_task, verifier_files
from .diagnose import environment_hint
from .environments import register_environment
from .harness import files_in_patch, grade, parse_pytest_log
from .image_recipes import Layer, LayerBuilder, build_instance_image, environment_layer, instance_layer
from .instance import DEFAULT_ENVIRONMENT, SWEEnvironment, SWEInstance, environment_for
from .loaders import InstanceLoadError, load_environments, load_instances
from .log_parsers import PARSERS, parse_log
from .package_layout import package_dirs, with_layout

__all__ = [
    "DEFAULT_ENVIRONMENT",
    "PARSERS",
    "InstanceLoadError",
    "Layer",
    "LayerBuilder",
    "SWEEnvironment",
    "SWEInstance",
    "apply_command",
    "build_instance_image",
    "environment_for",
    "environment_hint",
    "environment_layer",
    "files_in_patch",
    "grade",
    "instance_layer",
    "load_environments",
    "load_instances",
    "package_dirs",
    "parse_log",
    "parse_pytest_log",
    "register_environment",
    "swe_parts",
    "to_code_task",
    "verifier_files",
    "with_layout",
]
