"""`arborl gateway`: an OpenAI-compatible server in front of any arborl engine that records
each harness episode as token-exact trajectories.

gateway.py (the core: render, splice, generate, record), episodes.py (calls stitched into
segments), prompts.py (messages → prompt ids, replies → OpenAI messages), schema.py (the
requests), app.py (FastAPI routes), serve.py (uvicorn), errors.py (OpenAI-style errors).
See docs/gateway.md.
"""

from .episodes import Call, Episode, EpisodeStore, Segment
from .errors import BadRequest, EpisodeEnded, GatewayError, NoEpisode, UnknownEpisode
from .gateway import Gateway, GatewayConfig

__all__ = [
    "BadRequest",
    "Call",
    "Episode",
    "EpisodeEnded",
    "EpisodeStore",
    "Gateway",
    "GatewayConfig",
    "GatewayError",
    "NoEpisode",
    "Segment",
    "UnknownEpisode",
]
