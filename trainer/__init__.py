"""arborl.trainer: two trainers over one batch format.

- `local/`: `arborl train`, the single-process trainer (warm start, then asynchronous RL with
  bounded staleness; its config, learner, rollouts, checkpoints, metrics and report);
- `verl/`: `arborl verl-train`, verl's own Ray trainer with arborl's agent loop and
  estimators (and the CPU platform that runs it in tests), beside its YAML;
- `batch.py`: trajectories as verl `DataProto` rows, which both of them train on.
"""
