"""`arborl sandbox build|ls|gc`."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from arborl.sandboxes import (
    BwrapBackend,
    DockerBackend,
    DockerBackendConfig,
    SandboxBackend,
    SandboxUnavailable,
    make_backend,
)
from arborl.sandboxes.images import BaseImageRecipe, build_base_image

from .config import load_config, section

console = Console()


def _backends(cfg: Any) -> list[SandboxBackend]:
    """Every backend that can run here (ls/gc look at all of them under `auto`)."""
    sb = section(cfg, "sandbox")
    if sb["type"] != "auto":
        return [make_backend(sb)]
    out: list[SandboxBackend] = []
    for cls, key in ((DockerBackend, "docker"), (BwrapBackend, "bwrap")):
        try:
            out.append(make_backend(sb[key]))
        except SandboxUnavailable as e:
            console.print(f"[dim]{cls.name}: {e}[/dim]")
    return out


def cmd_build(args: argparse.Namespace) -> int:
    cfg = load_config(args.overrides)
    recipe = BaseImageRecipe(**section(cfg, "image"))
    sb = section(cfg, "sandbox")
    docker_cfg = sb["docker"] if sb["type"] == "auto" else sb
    if docker_cfg["type"] != "docker":
        console.print("the bubblewrap backend needs no image (it uses the host's /usr)")
        return 0
    backend = DockerBackend(DockerBackendConfig(**docker_cfg))
    start = time.time()
    with console.status(f"building {recipe.tag}") as status:
        tag = build_base_image(
            backend.client,
            recipe,
            force=args.force,
            log=lambda line: status.update(f"{recipe.tag}: {line[:100]}"),
        )
    console.print(
        f"[green]{tag}[/green] (also {recipe.repository}:latest) ready in {time.time() - start:.1f}s"
    )
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    table = Table("backend", "id", "status", "image", "owner pid", "owner", "age")
    now = time.time()
    for backend in _backends(load_config(args.overrides)):
        for info in backend.list_sandboxes():
            age = f"{now - info.created:.0f}s" if info.created else "?"
            table.add_row(
                info.backend,
                info.id[:12],
                info.status,
                info.image,
                str(info.owner_pid or "?"),
                "alive" if info.owner_alive else "[red]dead (orphan)[/red]",
                age,
            )
    console.print(table)
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    for backend in _backends(load_config(args.overrides)):
        removed = backend.reap(all_sandboxes=args.all, run=args.run)
        what = "sandboxes" if args.all else f"orphans and sandboxes of run {args.run}" if args.run else "orphans"
        console.print(f"{backend.name}: removed {len(removed)} {what}")
    return 0


def register(sub: Any, add: Any) -> None:
    sp = sub.add_parser(
        "sandbox",
        help="build images, list and garbage-collect sandboxes",
        description="Sandbox images and housekeeping.",
    )
    inner = sp.add_subparsers(dest="sandbox_command", metavar="ACTION", required=True)
    for name, fn, help_ in (
        (
            "build",
            cmd_build,
            "build the offline base image (debootstrap + docker import; cached by recipe hash)",
        ),
        ("ls", cmd_ls, "list sandboxes arborl made on this host, marking orphans"),
        ("gc", cmd_gc, "remove orphaned sandboxes (their harness died); --all removes every one"),
    ):
        p = inner.add_parser(name, help=help_, description=help_)
        p.set_defaults(fn=fn)
        if name == "build":
            p.add_argument("--force", action="store_true", help="rebuild even if the image exists")
        if name == "gc":
            p.add_argument("--all", action="store_true", help="remove every arborl sandbox, live ones too")
            p.add_argument("--run", help="also remove every sandbox of this run (label arborl.run), live owner or not")
        p.add_argument("overrides", nargs="*", help="Hydra overrides (key=value)")
