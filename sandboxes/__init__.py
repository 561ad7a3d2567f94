"""arborl.sandboxes."""
