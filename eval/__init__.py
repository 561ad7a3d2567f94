"""arborl.eval."""
