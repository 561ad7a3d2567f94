"""arborl.envs."""
