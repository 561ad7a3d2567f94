"""`arborl/TextWorld-v0`: TextWorld games, one process per episode (see `env.py`)."""

from .env import TextWorldEnv, parse_command, render
from .process import GameCrashed

__all__ = ["GameCrashed", "TextWorldEnv", "parse_command", "render"]
