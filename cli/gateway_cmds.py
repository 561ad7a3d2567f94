"""`arborl gateway`: an OpenAI-compatible server in front of an arborl engine that records
each harness episode as token-exact trajectories (arborl.agents.gateway, docs/gateway.md)."""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
from pathlib import Path
from typing import Any


def _admin_token(path: str | None) -> tuple[str, bool]:
    """(token, shown): the token in `path` (written there, 0600, when the file is new) or a
    fresh one to print."""
    if path is None:
        return secrets.token_urlsafe(24), True
    file = Path(path)
    if file.exists():
        token = file.read_text().strip()
        if not token:
            raise ValueError(f"{path} is empty: put the admin token in it, or name a new file")
        return token, False
    token = secrets.token_urlsafe(24)
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token, False


def _engine_config(args: argparse.Namespace) -> dict[str, Any]:
    """The `--engine` config: `--model`, and for an engine reached over HTTP (its config has a
    `base_url`: openai) `--engine-url`, asking for the served model's name."""
    from arborl.agents.engines import engine_config_class

    if "base_url" in engine_config_class(args.engine).model_fields:
        return {"type": args.engine, "base_url": args.engine_url, "model": args.served_model or args.model}
    return {"type": args.engine, "model": args.model}


def cmd_gateway(args: argparse.Namespace) -> int:
    from arborl.envs.openenv_access import AccessError, check_bind

    try:
        check_bind(args.host, args.allow_remote)
        token, shown = _admin_token(args.admin_token_file)
    except (AccessError, ValueError, OSError) as e:
        print(f"arborl gateway: {e}", file=sys.stderr)
        return 2
    from transformers import AutoTokenizer

    from arborl.agents.engines import make_engine
    from arborl.agents.gateway import Gateway, GatewayConfig
    from arborl.agents.gateway.serve import serve
    from arborl.agents.vision import load_policy_tokenizer

    # a vision-language model's processor, so requests may carry images
    tokenizer = (
        AutoTokenizer.from_pretrained(args.tokenizer) if args.tokenizer else load_policy_tokenizer(args.model)
    )
    engine = make_engine(_engine_config(args))
    config = GatewayConfig(
        model_name=args.served_model or Path(args.model).name,
        tool_parser=args.tool_parser,
        max_new_tokens=args.max_new_tokens,
        max_context_tokens=args.max_context_tokens,
        admin_token=token,
    )
    url = f"http://{args.host}:{args.port}"
    print(f"arborl gateway: {args.engine} engine on {args.model}, serving {url}/e/<episode>/v1", flush=True)
    print("admin token: " + (token if shown else f"in {args.admin_token_file}"), flush=True)
    try:
        serve(Gateway(engine, tokenizer, config), host=args.host, port=args.port)
    finally:
        asyncio.run(engine.close())
    return 0


def register(add: Any) -> None:
    from arborl.agents.engines import engine_kinds

    sp = add(
        "gateway",
        "serve an engine over OpenAI's API and record each harness episode as trajectories",
        cmd_gateway,
    )
    sp.add_argument(
        "--model", required=True, help="model directory (HF layout) or, for --engine openai, its name"
    )
    sp.add_argument(
        "--engine",
        choices=engine_kinds(),
        default="transformers",
        help="a registered engine (`arborl engines`)",
    )
    sp.add_argument(
        "--engine-url", default="http://127.0.0.1:8000", help="an engine over HTTP (openai): the server root"
    )
    sp.add_argument("--served-model", default=None, help="the model name answered (default: the model's)")
    sp.add_argument("--tokenizer", default=None, help="tokenizer directory (default: --model)")
    sp.add_argument("--tool-parser", default="hermes", help="the model's native tool-call format")
    sp.add_argument("--max-new-tokens", type=int, default=512, help="reply cap when a request sets none")
    sp.add_argument("--max-context-tokens", type=int, default=None, help="refuse longer prompt + reply")
    sp.add_argument("--host", default="127.0.0.1")
    sp.add_argument("--port", type=int, default=8000)
    sp.add_argument("--allow-remote", action="store_true", help="allow a --host other machines can reach")
    sp.add_argument(
        "--admin-token-file",
        default=None,
        help="file holding the admin token (/admin routes: open and end episodes); created when new",
    )
