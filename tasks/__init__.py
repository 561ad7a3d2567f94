"""arborl.tasks."""
