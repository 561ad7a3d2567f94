"""The viewer's page: load a run or eval directory, render one HTML file, or serve it on loopback.

    page = load_dir("runs/eval/tool-mini-gold")      # PageData (NotViewable if it is neither)
    path = write_page(page, out=None)                # <dir>/view.html
    server = serve_page(page, port=0)                # 127.0.0.1 only; server.serve_forever()

The page is one self-contained file (CSS and script inline, `page.html`, a Jinja2 template
with autoescaping). Its data is JSON in ``<script type="application/json">`` elements
(Jinja2's ``htmlsafe_json_dumps``, which escapes ``<``, ``>``, ``&`` and ``'``, so no text
can close the element): the episode index, parsed at load, and the episodes' details in
chunks of `CHUNK`, parsed when one of their episodes is opened; the script builds the DOM
with text nodes only. Screenshots and whole logs are linked relative to the page, not
embedded. The list shows 100 episodes a page and an episode's turns are built when it opens,
so a run of thousands of episodes opens at once; one whose details pass `INLINE_LIMIT`
characters keeps them in ``view_files/chunk-NNNNN.js`` beside the page, loaded on demand
(a ``<script src>``, which works from ``file://`` where ``fetch`` does not).
"""

from __future__ import annotations

import logging
import mimetypes
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import jinja2
from jinja2.utils import htmlsafe_json_dumps

from .evals import is_eval_dir, load_eval
from .model import PageData
from .runs import is_run_dir, load_run

log = logging.getLogger(__name__)
TEMPLATE = "page.html"
#: Episodes per chunk of details: the page parses (or loads) a chunk when one of its episodes opens.
CHUNK = 200
#: Characters of episode details a page holds inline; past it they go to files beside the page.
INLINE_LIMIT = 32 * 1024 * 1024
LOOPBACK = "127.0.0.1"


class NotViewable(FileNotFoundError):
    """The directory is neither an evaluation run nor a training run."""


def load_dir(path: str | Path) -> PageData:
    """The page data of an eval run directory or a training run directory."""
    p = Path(path)
    if not p.is_dir():
        raise NotViewable(f"{p}: no such directory")
    if is_eval_dir(p):
        return load_eval(p)
    if is_run_dir(p):
        return load_run(p)
    raise NotViewable(
        f"{p} is neither an evaluation run (it has no results.sqlite) nor a training run (no "
        "trajectories/ with group-*.parquet, no sft/demos.parquet): nothing to view. Give the "
        "run.dir of an `arborl eval` or an `arborl train`."
    )


def render(
    page: PageData, base: str = "", files_dir: str = "view_files", inline_limit: int = INLINE_LIMIT
) -> tuple[str, dict[str, str]]:
    """The page's HTML, and the files it loads its episodes' details from ({path: text}; empty
    when the details are inline, as for any run whose details are under `inline_limit`
    characters). `base` is prefixed to linked run files (screenshots, logs); `files_dir` is
    where the detail files go, relative to the page."""
    head, chunks = page.pack(CHUNK)
    head["base"] = base
    bodies = [htmlsafe_json_dumps(chunk) for chunk in chunks]
    files: dict[str, str] = {}
    if sum(len(b) for b in bodies) > inline_limit:
        head["chunk_files"] = [f"{files_dir}/chunk-{k:05d}.js" for k in range(len(bodies))]
        files = {
            path: f"arborlChunk({k}, {body});\n"
            for k, (path, body) in enumerate(zip(head["chunk_files"], bodies, strict=True))
        }
        bodies = []
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    html = env.get_template(TEMPLATE).render(title=page.title, source=page.source, data=head, chunks=bodies)
    return html, files


def write_page(page: PageData, out: str | Path | None = None, inline_limit: int = INLINE_LIMIT) -> Path:
    """Write the page (default: ``<dir>/view.html``), its links relative to where it is; a run
    too large to hold inline gets its details in ``<page>_files/`` beside it."""
    source = Path(page.source)
    path = Path(out) if out is not None else source / "view.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    base = Path(os.path.relpath(source.resolve(), path.parent.resolve())).as_posix()
    files_dir = f"{path.stem}_files"
    html, files = render(page, "" if base == "." else base + "/", files_dir, inline_limit)
    for stale in (path.parent / files_dir).glob("chunk-*.js"):  # an earlier, larger page's
        stale.unlink()
    for rel, text in files.items():
        _atomic_write(path.parent / rel, text)
    _atomic_write(path, html)
    return path


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def serve_page(page: PageData, port: int = 0, inline_limit: int = INLINE_LIMIT) -> ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1 (never another address) that answers the page at ``/`` and
    the files it links (and nothing else of the directory). Port 0: a free one
    (``server.server_address[1]``). The caller runs ``serve_forever()``."""
    text, details = render(page, files_dir="_details", inline_limit=inline_limit)
    html = text.encode("utf-8")
    chunks = {path: body.encode("utf-8") for path, body in details.items()}
    root = Path(page.source).resolve()
    files = set(page.files)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = unquote(urlsplit(self.path).path).lstrip("/")
            if path in ("", "index.html", "view.html"):
                self._send(html, "text/html; charset=utf-8")
            elif path in chunks:
                self._send(chunks[path], "text/javascript; charset=utf-8")
            elif path in files and (root / path).is_file():
                kind = mimetypes.guess_type(path)[0] or "application/octet-stream"
                self._send((root / path).read_bytes(), kind)
            else:
                self.send_error(404, "not a file of this page")

        def _send(self, body: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    return ThreadingHTTPServer((LOOPBACK, port), Handler)
