"""Errors of the gateway, answered the OpenAI way: ``{"error": {"message", "type", "param", "code"}}``.

Harnesses built on the `openai` client turn that body into typed exceptions
(`openai.NotFoundError`, `openai.BadRequestError`, ...) whose message is ours, so every
error here says what was wrong and what to do next.
"""

from __future__ import annotations

from typing import Any


class GatewayError(Exception):
    """A request the gateway refuses; `status` is the HTTP status it is answered with."""

    status: int = 400
    type: str = "invalid_request_error"
    code: str = "invalid_request"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self) -> dict[str, Any]:
        """The OpenAI-style JSON body."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class BadRequest(GatewayError):
    """Malformed or unsupported request fields."""


class NoEpisode(GatewayError):
    """The request names no episode at all."""

    status = 401
    type = "authentication_error"
    code = "missing_episode_id"


class UnknownEpisode(GatewayError):
    """The request names an episode this gateway never opened."""

    status = 404
    code = "episode_not_found"


class EpisodeEnded(GatewayError):
    """The episode has ended (its reward is set); it takes no more calls."""

    status = 409
    code = "episode_ended"


class Forbidden(GatewayError):
    """An admin route without the admin token."""

    status = 403
    type = "permission_error"
    code = "forbidden"


class EngineFailed(GatewayError):
    """The engine behind the gateway failed (an infrastructure error, not the harness's)."""

    status = 502
    type = "server_error"
    code = "engine_error"


def error_body(message: str, *, type_: str = "invalid_request_error", code: str = "invalid_request") -> dict:
    """An OpenAI-style body for errors raised outside `GatewayError` (validation, routing)."""
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}
