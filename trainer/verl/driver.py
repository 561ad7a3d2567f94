"""`ArborlTaskRunner`: verl's ``TaskRunner`` (the Ray actor that runs verl's driver,
``RayPPOTrainer.fit``) whose ``run`` first readies its process for arborl.

verl's advantage step runs in this actor's process, so this is where arborl's estimators must
be registered and given their per-row fields (`arborl.trainer.verl.credit.install`). The rest
is verl's own ``run``: workers, datasets, ``RayPPOTrainer`` and ``fit``.
"""

from __future__ import annotations

import os
from typing import Any

import ray
from verl.trainer import main_ppo_v0

from arborl.trainer.verl.cpu import VerlPatchError


def _verl_run() -> Any:
    """verl's own ``TaskRunner.run`` (the class under its ``@ray.remote``, which Ray keeps as
    ``__ray_actor_class__``). Only the function is borrowed: verl's class calls a zero-argument
    ``super()`` in ``__init__``, which a subclass loaded in a Ray worker breaks."""
    meta = getattr(main_ppo_v0.TaskRunner, "__ray_metadata__", None)
    cls = getattr(getattr(meta, "modified_class", None), "__ray_actor_class__", None)
    run = vars(cls).get("run") if isinstance(cls, type) else None
    if (
        run is None
        or not issubclass(cls, main_ppo_v0.BaseTaskRunner)
        or "__class__" in run.__code__.co_freevars  # it would need verl's own class
    ):
        raise VerlPatchError(
            "verl.trainer.main_ppo_v0.TaskRunner.run is no longer a plain method of a Ray actor "
            "over BaseTaskRunner: update arborl.trainer.verl.driver for this verl"
        )
    return run


_VERL_RUN = _verl_run()


class ArborlTaskRunner(main_ppo_v0.BaseTaskRunner):
    """verl's TaskRunner; ``run`` installs arborl's credit hook in the driver, then runs verl's."""

    def run(self, config: Any) -> Any:
        from arborl.trainer.verl import credit
        from arborl.trainer.verl.config import ArborlSection

        if os.environ.get("VERL_PLATFORM", "").lower() == "cpu":
            import arborl.trainer.verl.cpu  # noqa: F401 - verl imports it as well; make sure

        credit.install(credit_log=ArborlSection.of(config).credit_log)
        return _VERL_RUN(self, config)


#: What `verl.trainer.main_ppo.run_ppo` takes as ``task_runner_class``.
ArborlTaskRunnerActor = ray.remote(ArborlTaskRunner)
