"""`arborl view RUN_OR_EVAL_DIR`: the trajectory viewer (one HTML page, or served on loopback)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

console = Console(soft_wrap=True)  # long lines (paths) stay whole in logs and pipes


def cmd_view(args: argparse.Namespace) -> int:
    from arborl.eval.viewer import NotViewable, load_dir, serve_page, write_page

    try:
        page = load_dir(args.dir)
    except NotViewable as e:
        console.print(str(e), style="red", markup=False, highlight=False)
        return 2
    if not args.serve:
        path = write_page(page, args.out)
        console.print(f"wrote {path} ({len(page.episodes)} episodes)")
        return 0
    server = serve_page(page, args.port)
    host, port = server.server_address[:2]
    console.print(f"serving {len(page.episodes)} episodes at http://{host}:{port}/ (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def register(add: Any) -> None:
    sp = add(
        "view",
        "trajectory viewer: an HTML page of a training run's or an eval run's episodes (turns, tool "
        "calls, rewards, screenshots, grades)",
        cmd_view,
    )
    sp.add_argument("dir", help="a training run directory (run.dir of arborl train) or an eval run directory")
    sp.add_argument("--out", default=None, help="where to write the page (default: DIR/view.html)")
    sp.add_argument("--serve", action="store_true", help="serve the page on 127.0.0.1 instead of writing it")
    sp.add_argument("--port", type=int, default=0, help="port to serve on (default: a free one)")
