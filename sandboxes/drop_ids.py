"""The `arborl-drop` helper: how the sandbox server starts a command as the agent.

`drop_ids.c` is compiled once per host (static, so it runs in any image) into the user's
cache and mounted read-only into every sandbox; the server then vforks and execs it for
each agent command. Where no C compiler exists the server falls back to util-linux
`setpriv`, which does the same at about 2 ms more per command (docs/sandboxes.md).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("drop_ids.c")
IN_SANDBOX = "/opt/arborl/bin/arborl-drop"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "arborl" / "bin"


@functools.cache
def drop_helper() -> Path | None:
    """The built helper's host path, or None (with a warning) where it cannot be built."""
    source = SOURCE.read_bytes()
    target = cache_dir() / f"arborl-drop-{hashlib.sha256(source).hexdigest()[:16]}"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        log.warning("no C compiler: agent commands start through setpriv (about 2 ms slower each)")
        return None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            out = Path(tmp) / "arborl-drop"
            res = subprocess.run(
                [cc, "-static", "-O2", "-o", str(out), str(SOURCE)], capture_output=True, text=True
            )
            if res.returncode != 0:
                log.warning(
                    "could not build arborl-drop (%s); agent commands start through setpriv "
                    "(about 2 ms slower each). A static link needs libc6-dev.",
                    res.stderr.strip().splitlines()[-1:] or res.returncode,
                )
                return None
            out.chmod(0o755)
            os.replace(out, target)  # atomic: concurrent builders each leave a whole file
    except OSError as e:
        log.warning("could not build arborl-drop (%s); agent commands start through setpriv", e)
        return None
    return target
