"""The gateway over HTTP (FastAPI): OpenAI's routes for harnesses, admin routes for the trainer.

Harness routes, each also under ``/e/<episode id>``::

    POST /v1/chat/completions     (stream: Server-Sent Events, OpenAI's chunk format)
    POST /v1/completions
    GET  /v1/models

The episode id travels the way a harness can carry it, first found wins: the path prefix
(``base_url=http://host:port/e/<id>/v1``), the ``X-Arborl-Episode`` header, or the API key
(``Authorization: Bearer <id>``).

Admin routes (``Authorization: Bearer <admin token>``; absent when no token is configured)::

    POST /admin/episodes                 {"task_id", "group_id"}  -> {"episode_id", "path"}
    POST /admin/episodes/<id>/end        {"reward"}               -> {"trajectories": [...]}
    GET  /admin/episodes/<id>                                      -> {"trajectories": [...]}

Streaming sends the reply once it is sampled (the engine contract returns whole
responses): a role chunk, a content chunk, one chunk per tool call, the finish chunk,
usage when ``stream_options.include_usage``, then ``[DONE]``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import secrets
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from arborl.envs.images import png_bytes

from .errors import Forbidden, GatewayError, NoEpisode, error_body
from .gateway import Gateway, Result
from .schema import ChatRequest, CompletionRequest

EPISODE_HEADER = "x-arborl-episode"


def episode_id(request: Request, in_path: str | None) -> str:
    """The episode id of a harness request: path prefix, then header, then API key."""
    if in_path:
        return in_path
    if header := request.headers.get(EPISODE_HEADER, "").strip():
        return header
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return auth[7:].strip()
    raise NoEpisode(
        "no episode id: put it in base_url (http://host:port/e/<id>/v1), the X-Arborl-Episode "
        "header, or the API key"
    )


def _usage(res: Result) -> dict[str, int]:
    p, c = len(res.prompt_ids), len(res.gen.token_ids)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _chat_logprobs(gw: Gateway, res: Result) -> dict[str, Any]:
    entries = []
    for t, lp in zip(res.gen.token_ids, res.gen.logprobs, strict=True):
        text = gw.token_text(t)
        entries.append({"token": text, "logprob": lp, "bytes": list(text.encode()), "top_logprobs": []})
    return {"content": entries}


def chat_body(gw: Gateway, req: ChatRequest, res: Result) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": res.content}
    if res.reasoning is not None:
        message["reasoning_content"] = res.reasoning
    if res.tool_calls:
        message["tool_calls"] = res.tool_calls
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": res.finish_reason,
        "logprobs": _chat_logprobs(gw, res) if req.logprobs else None,
    }
    body = {
        "id": f"chatcmpl-{res.id}",
        "object": "chat.completion",
        "created": res.created,
        "model": gw.config.model_name,
        "choices": [choice],
        "usage": _usage(res),
    }
    if req.return_token_ids:
        choice["token_ids"] = list(res.gen.token_ids)
        body["prompt_token_ids"] = list(res.prompt_ids)
    return body


def chat_chunks(gw: Gateway, req: ChatRequest, res: Result) -> Iterator[str]:
    """Server-Sent Events of one sampled reply, in OpenAI's chunk format."""
    head = {
        "id": f"chatcmpl-{res.id}",
        "object": "chat.completion.chunk",
        "created": res.created,
        "model": gw.config.model_name,
    }

    def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, **extra}
        return f"data: {json.dumps(head | {'choices': [choice]}, ensure_ascii=False)}\n\n"

    yield event({"role": "assistant", "content": ""})
    delta: dict[str, Any] = {"content": res.content or ""}
    if res.reasoning is not None:
        delta["reasoning_content"] = res.reasoning
    yield event(delta, logprobs=_chat_logprobs(gw, res) if req.logprobs else None)
    for i, call in enumerate(res.tool_calls or []):
        yield event({"tool_calls": [{"index": i, **call}]})
    yield event({}, res.finish_reason)
    if req.include_usage:
        yield f"data: {json.dumps(head | {'choices': [], 'usage': _usage(res)})}\n\n"
    yield "data: [DONE]\n\n"


def completion_body(gw: Gateway, req: CompletionRequest, res: Result) -> dict[str, Any]:
    logprobs = None
    if req.logprobs is not None:
        tokens = [gw.token_text(t) for t in res.gen.token_ids]
        logprobs = {"tokens": tokens, "token_logprobs": list(res.gen.logprobs), "top_logprobs": None}
    choice: dict[str, Any] = {
        "index": 0,
        "text": res.content,
        "finish_reason": res.gen.finish_reason,
        "logprobs": logprobs,
    }
    if req.return_token_ids:
        choice["token_ids"] = list(res.gen.token_ids)
        choice["prompt_token_ids"] = list(res.prompt_ids)
    return {
        "id": f"cmpl-{res.id}",
        "object": "text_completion",
        "created": res.created,
        "model": gw.config.model_name,
        "choices": [choice],
        "usage": _usage(res),
    }


def _completion_chunks(gw: Gateway, req: CompletionRequest, res: Result) -> Iterator[str]:
    body = completion_body(gw, req, res)
    body["object"] = "text_completion"
    yield f"data: {json.dumps(body, ensure_ascii=False)}\n\n"
    yield "data: [DONE]\n\n"


def harness_routes(gw: Gateway) -> APIRouter:
    router = APIRouter()

    async def chat(request: Request, req: ChatRequest, eid: str | None = None) -> Any:
        res = await gw.chat(episode_id(request, eid), req)
        if req.stream:
            return StreamingResponse(chat_chunks(gw, req, res), media_type="text/event-stream")
        return chat_body(gw, req, res)

    async def complete(request: Request, req: CompletionRequest, eid: str | None = None) -> Any:
        res = await gw.complete(episode_id(request, eid), req)
        if req.stream:
            return StreamingResponse(_completion_chunks(gw, req, res), media_type="text/event-stream")
        return completion_body(gw, req, res)

    async def models(eid: str | None = None) -> dict[str, Any]:
        model = {"id": gw.config.model_name, "object": "model", "created": 0, "owned_by": "arborl"}
        return {"object": "list", "data": [model]}

    for prefix in ("", "/e/{eid}"):
        router.add_api_route(f"{prefix}/v1/chat/completions", chat, methods=["POST"])
        router.add_api_route(f"{prefix}/v1/completions", complete, methods=["POST"])
        router.add_api_route(f"{prefix}/v1/models", models, methods=["GET"])
    return router


class OpenRequest(BaseModel):
    episode_id: str | None = None
    task_id: str = ""
    group_id: str = ""


class EndRequest(BaseModel):
    reward: float


def admin_routes(gw: Gateway, token: str) -> APIRouter:
    router = APIRouter(prefix="/admin")

    def check(request: Request) -> None:
        auth = request.headers.get("authorization", "")
        if not secrets.compare_digest(auth.encode(), f"Bearer {token}".encode()):
            raise Forbidden("admin routes need the gateway's admin token (Authorization: Bearer <token>)")

    @router.post("/episodes")
    async def open_episode(request: Request, body: OpenRequest) -> dict[str, str]:
        check(request)
        try:
            eid = gw.open_episode(body.episode_id, task_id=body.task_id, group_id=body.group_id)
        except ValueError as e:
            raise GatewayError(str(e), code="episode_exists") from e
        return {"episode_id": eid, "path": f"/e/{eid}/v1"}

    @router.post("/episodes/{eid}/end")
    async def end_episode(request: Request, eid: str, body: EndRequest) -> dict[str, Any]:
        check(request)
        return {"trajectories": [_as_json(t) for t in gw.end_episode(eid, body.reward)]}

    @router.get("/episodes/{eid}")
    async def show_episode(request: Request, eid: str) -> dict[str, Any]:
        check(request)
        return {"trajectories": [_as_json(t) for t in gw.trajectories(eid)]}

    return router


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "invalid request: " + "; ".join(parts)


class BodyLimit:
    """Refuses a request body over `limit` bytes (413): one whose Content-Length says so before
    a byte is read, one sent in chunks as soon as what arrived passes the limit. The body is
    read here (as FastAPI would read it anyway) and handed on whole, because an error raised
    from inside FastAPI's own body reading would come out as its 400.

    A plain ASGI middleware: starlette's `BaseHTTPMiddleware` (``@app.middleware``) wraps every
    request in a task group and a body stream, the largest share of the gateway's own time per
    call under concurrent episodes (bench/bench_gateway.py)."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        size = dict(scope["headers"]).get(b"content-length")
        if size is not None and (not size.isdigit() or int(size) > self.limit):
            await self._refuse(scope, receive, send)
            return
        chunks, received = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before its body was read
                return
            chunks.append(message.get("body", b""))
            received += len(chunks[-1])
            if received > self.limit:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        whole: dict[str, Any] | None = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        async def replay() -> Any:
            nonlocal whole
            if whole is not None:
                message, whole = whole, None
                return message
            return await receive()  # later reads: a disconnect while the reply is made

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Any, receive: Any, send: Any) -> None:
        message = f"the request body is larger than this gateway takes ({self.limit} bytes)"
        await JSONResponse(error_body(message, code="request_too_large"), status_code=413)(
            scope, receive, send
        )


def make_app(gw: Gateway) -> FastAPI:
    """The FastAPI app of `gw` (serve it with uvicorn: `serve.serve`)."""
    app = FastAPI(title="arborl gateway", docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(harness_routes(gw))
    if gw.config.admin_token:
        app.include_router(admin_routes(gw, gw.config.admin_token))

    app.add_middleware(BodyLimit, limit=gw.config.max_request_bytes)

    @app.exception_handler(GatewayError)
    async def _gateway_error(_: Request, exc: GatewayError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(_validation_message(exc)), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = f"{request.method} {request.url.path}: {exc.detail}"
        if exc.status_code == 404:
            message += " (routes: /v1/chat/completions, /v1/completions, /v1/models, each also under /e/<id>)"
        return JSONResponse(error_body(message, code=f"http_{exc.status_code}"), status_code=exc.status_code)

    return app


def _as_json(traj: Any) -> dict[str, Any]:
    """A trajectory as JSON: its fields, a VLM's pixel arrays (`ImageInputs`) as nested lists
    and its pictures as PNG data URLs (the form an OpenAI image part takes)."""

    def value(key: str, v: Any) -> Any:
        if key == "pictures":
            return [f"data:image/png;base64,{base64.b64encode(png_bytes(p) or b'').decode()}" for p in v]
        return v.tolist() if hasattr(v, "tolist") else v

    return dataclasses.asdict(traj, dict_factory=lambda kv: {k: value(k, v) for k, v in kv})
