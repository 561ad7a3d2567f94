"""`arborl sandbox build|ls|gc|backends`: every backend comes from the registry
(arborl.sandboxes.factory), a registered plug-in's too."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from arborl.sandboxes import SandboxBackend, SandboxUnavailable, backend_names, make_backend
from arborl.sandboxes.factory import BACKENDS
from arborl.sandboxes.images import BaseImageRecipe, build_base_image

from .config import config_cells, load_config, section

console = Console()


def _backends(cfg: Any) -> list[SandboxBackend]:
    """The backends `ls`/`gc` look at: the one `sandbox` names, or under a choice (`auto`) or a
    cluster (`ray`: this host's part of it) every registered host backend that runs here,
    each with the `sandbox` section's own settings for it where it has some."""
    sb = section(cfg, "sandbox")
    if BACKENDS[sb["type"]].kind == "host":
        return [make_backend(sb)]
    out: list[SandboxBackend] = []
    for name in backend_names("host"):
        sub = sb.get(name)
        try:
            out.append(make_backend(sub if isinstance(sub, dict) else {"type": name}))
        except SandboxUnavailable as e:
            console.print(f"[dim]{name}: {e}[/dim]")
    return out


def cmd_build(args: argparse.Namespace) -> int:
    """The base image is a Docker image: built on the Docker backend `sandbox` names or holds."""
    from arborl.sandboxes import DockerBackend

    cfg = load_config(args.overrides)
    recipe = BaseImageRecipe(**section(cfg, "image"))
    sb = section(cfg, "sandbox")
    docker_cfg = sb if sb["type"] == "docker" else sb.get("docker")
    if not isinstance(docker_cfg, dict):
        console.print(
            f"sandbox={sb['type']} needs no image here (the base image is Docker's; bwrap uses the host's /usr)"
        )
        return 0
    backend = make_backend(docker_cfg)
    assert isinstance(backend, DockerBackend)
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


def cmd_backends(args: argparse.Namespace) -> int:
    """The registered backends: `sandbox=<name>` picks one."""
    table = Table("sandbox=", "kind", "config", "config keys", title="registered sandbox backends")
    for name, entry in BACKENDS.items():
        where, keys = config_cells(entry)
        table.add_row(name, entry.kind, where, keys)
    console.print(table)
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
        what = (
            "sandboxes" if args.all else f"orphans and sandboxes of run {args.run}" if args.run else "orphans"
        )
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
        ("backends", cmd_backends, "list the registered sandbox backends (what sandbox=... may name)"),
    ):
        p = inner.add_parser(name, help=help_, description=help_)
        p.set_defaults(fn=fn)
        if name == "build":
            p.add_argument("--force", action="store_true", help="rebuild even if the image exists")
        if name == "gc":
            p.add_argument("--all", action="store_true", help="remove every arborl sandbox, live ones too")
            p.add_argument(
                "--run", help="also remove every sandbox of this run (label arborl.run), live owner or not"
            )
        if name != "backends":
            p.add_argument("overrides", nargs="*", help="Hydra overrides (key=value)")
