"""arborl.trainer."""
