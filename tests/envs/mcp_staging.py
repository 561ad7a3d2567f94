"""Stage `fastmcp` for a sandbox: the bwrap sandbox sees only the host's /usr (whose python3
has no fastmcp) and has no network, so the tests copy in what a fastmcp server imports.

Which files: a probe runs the server once on the host (the test venv's fastmcp, over stdio:
initialize, tools/list, a call) and records the top-level packages it imported, with their
dist-info (fastmcp reads its version from it). They go into one tar.gz (with their
__pycache__, so the sandbox's python3.11 starts the server without compiling it), which the
env uploads into the sandbox before it starts the server (`upload=`)."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tarfile
from pathlib import Path

PROBE = """
import atexit, json, runpy, sys
out = sys.argv[2]
def dump():
    json.dump(sorted({m.__name__.split(".")[0] for m in list(sys.modules.values())
                      if getattr(m, "__file__", None)}), open(out, "w"))
atexit.register(dump)
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

HELLO = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]  # fmt: skip


def stage_fastmcp(server: Path, out: Path) -> Path:
    """A tar.gz of what `server` (a fastmcp stdio server) imports from site-packages."""
    probe, mods = out.parent / "probe.py", out.parent / "modules.json"
    probe.write_text(PROBE)
    stdin = "".join(json.dumps(m) + "\n" for m in HELLO)
    subprocess.run(
        [sys.executable, str(probe), str(server), str(mods)], input=stdin, text=True,
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    site = Path(importlib.metadata.distribution("fastmcp").locate_file(""))
    owners = importlib.metadata.packages_distributions()
    with tarfile.open(out, "w:gz", compresslevel=1) as tar:
        for top in json.loads(mods.read_text()):
            paths = [site / top, *site.glob(f"{top}.*.so"), site / f"{top}.py"]
            found = [p for p in paths if p.exists() and not p.name.startswith("__editable__")]
            for p in found:
                tar.add(p, arcname=p.name)
            for dist in owners.get(top, []) if found else []:
                meta = importlib.metadata.distribution(dist)
                info = Path(str(meta._path))  # type: ignore[attr-defined]
                if info.parent == site and info.name not in tar.getnames():
                    tar.add(info, arcname=info.name)
    return out
