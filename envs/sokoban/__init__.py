"""`arborl/Sokoban-v0`: Sokoban as verl-agent and RAGEN run it (`env.SokobanEnv`)."""
