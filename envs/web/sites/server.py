"""Entry point of a self-hosted site: `python3 server.py SITE --port N --admin-socket PATH`.

Standard library only: it runs as a script under the site container's Debian python3 (no
pip there) or, on the bubblewrap backend, under the host's python3. Its directory holds the
site modules (`shop.py`, `admin.py`, ...), each defining `SITE`, a `common.Site` subclass.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
import time


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("site", help="module name of the site (shop, admin, ...)")
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=8000, help="public port (0: any free one)")
    ap.add_argument("--admin-socket", required=True, help="unix socket of the harness's endpoints")
    ap.add_argument("--port-file", help="write the public port here once listening")
    ap.add_argument("--exit-with-parent", action="store_true", help="exit when the harness dies")
    args = ap.parse_args(argv)
    if args.exit_with_parent:  # host processes (bubblewrap backend) must not outlive a killed harness
        threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    from common import serve

    site = importlib.import_module(args.site).SITE()
    serve(site, args.host, args.port, args.admin_socket, args.port_file)


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
