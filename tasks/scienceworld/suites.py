"""The ScienceWorld suites (`arborl.tasks.suites` imports this module to register them).

`scienceworld-<task>` per task type: the first few of the package's test variations of that
type. `scienceworld`: all of those together. `scienceworld-train`: every train variation of
every type (for training). The names come from the variation
snapshot, so registering reads one JSON file and starts no JVM.
"""

import json

from ..suites import Suite, register_suite
from .task import SUITE_VARIATIONS, split_budget
from .variations import SNAPSHOT

_TYPES: dict[str, dict] = json.loads(SNAPSHOT.read_text())["tasks"]
_GOLD = "arborl.tasks.scienceworld.gold:gold_policy"
_EMPTY = "arborl.tasks.scienceworld.gold:empty_policy"
_ENV = "arborl/ScienceWorld-v0"


for _name, _info in sorted(_TYPES.items()):
    register_suite(
        Suite(
            f"scienceworld-{_name}",
            _ENV,
            f"arborl.tasks.scienceworld.task:load_{_name}",
            description=f"ScienceWorld {_name}: {SUITE_VARIATIONS} of its {len(_info['test'])} test variations",
            gold=_GOLD,
            empty=_EMPTY,
            max_turns=split_budget(names=[_name]),
            tags=("scienceworld", "multi-turn"),
        )
    )
register_suite(
    Suite(
        "scienceworld",
        _ENV,
        "arborl.tasks.scienceworld.task:load_all",
        description=f"ScienceWorld, all 30 task types: {SUITE_VARIATIONS} test variations of each",
        gold=_GOLD,
        empty=_EMPTY,
        max_turns=split_budget(),
        tags=("scienceworld", "multi-turn"),
    )
)
register_suite(
    Suite(
        "scienceworld-train",
        _ENV,
        "arborl.tasks.scienceworld.task:load_train",
        description="ScienceWorld's train split: every train variation of the 30 task types",
        gold=_GOLD,
        empty=_EMPTY,
        max_turns=split_budget("train", None),
        tags=("scienceworld", "multi-turn", "train"),
    )
)
