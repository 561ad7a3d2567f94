"""arborl.agents."""
