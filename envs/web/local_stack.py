"""The local web stack: the sites as host processes, Debian's Chromium through Playwright.

The contract and the isolation it keeps (resolver rules, per-context proxy) are in
stack.py; this is the implementation for machines without a container engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.async_api import Browser, Playwright

from arborl.sandboxes import SandboxUnavailable

from .sites import SiteDef
from .stack import SiteHandle, WebStack, wait_for_site


class LocalStack(WebStack):
    """Host processes: the sites under this Python, Debian's Chromium through Playwright.

    For machines without a container engine. The sites listen on 127.0.0.1 (free ports);
    the same resolver rules and per-context proxy keep the browser to the task's sites.
    Weaker than Docker in that everything shares the host's network stack.
    """

    kind = "local"

    def __init__(self, playwright: Playwright, chromium: str = "/usr/bin/chromium") -> None:
        super().__init__(playwright)
        path = shutil.which(chromium) or (chromium if os.path.exists(chromium) else None)
        if path is None:
            raise SandboxUnavailable(
                f"no Chromium at {chromium}: install Debian's chromium (scripts/setup.sh does); "
                "`playwright install` cannot download browsers here"
            )
        self.chromium = path
        self.dir = Path(tempfile.mkdtemp(prefix=f"arborl-web-{self.id}-"))
        # A port bound but never listening refuses every connection: the dead proxy.
        self._blackhole = socket.socket()
        self._blackhole.bind(("127.0.0.1", 0))
        self.proxy = f"http://127.0.0.1:{self._blackhole.getsockname()[1]}"

    async def _start_site(self, site: SiteDef) -> SiteHandle:
        d = self.dir / site.name
        d.mkdir()
        for name, text in site.sources().items():
            (d / name).write_text(text, encoding="utf-8")
        sock, port_file, logfile = d / "admin.sock", d / "port", d / "log"
        with open(logfile, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, str(d / "server.py"), site.name, "--host", "127.0.0.1", "--port", "0",
                 "--admin-socket", str(sock), "--port-file", str(port_file), "--exit-with-parent"],
                cwd=d, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
            )  # fmt: skip
        handle = SiteHandle(site, "", str(sock), proc)

        def died() -> str | None:
            code = proc.poll()
            return None if code is None else f"exit code {code}: {logfile.read_text()[-2000:]}"

        try:
            await wait_for_site(str(sock), 30.0, died=died)
        except BaseException:
            await self._stop_site(handle)
            raise
        handle.address = f"127.0.0.1:{port_file.read_text().strip()}"
        return handle

    async def _stop_site(self, handle: SiteHandle) -> None:
        proc: subprocess.Popen[bytes] = handle.handle
        if proc.poll() is None:
            proc.kill()
        await asyncio.to_thread(proc.wait)

    async def _start_browser(self, args: list[str]) -> Browser:
        return await self.playwright.chromium.launch(
            executable_path=self.chromium, headless=True, args=[*args, f"--arborl-stack={self.id}"]
        )

    def _browser_pids(self) -> list[int]:
        marker = f"--arborl-stack={self.id}".encode()
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if marker in Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0"):
                        pids.append(int(entry))
        return pids

    async def _stop_browser(self) -> None:
        await self.kill_browser()

    async def kill_browser(self) -> None:
        for pid in self._browser_pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    async def _teardown(self) -> None:
        self._blackhole.close()
        shutil.rmtree(self.dir, ignore_errors=True)
