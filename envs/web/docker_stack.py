"""The Docker web stack: the browser and each site in their own sandbox container, all on
one private network per stack.

    host (harness)                       network arborl-web-<id>: --internal, no host address
    ──────────────                       ─────────────────────────────────────────────────────
    Playwright ── TCP 127.0.0.1:p ─┐     [browser]  arborl/gui: chromium (agent user),
      (UnixRelay)                  └─unix──▶ /run/arborl/cdp.sock ─ socat ─▶ 127.0.0.1:9222
    admin client ──unix──▶ /run/arborl/site/admin.sock   [shop]  arborl/base: server.py :8000
                                                         [admin] arborl/base: server.py :8000

The network is `--internal` (no route out) and created with `inhibit_ipv4`, so the host
has no address on it: nothing in the stack can reach the host or anything else, only the
other containers of the stack. The harness reaches the browser's DevTools endpoint and the
sites' admin endpoints through unix sockets in each sandbox's bind-mounted run directory.
Networks carry owner labels like sandboxes; the orphans of dead harnesses are removed when
the next stack starts.

The containers are made by the sandbox backend (same hardening, labels and reaping as every
sandbox) but are not checked out of a `SandboxPool`: a stack needs several at once, and
stacks taking them one by one from a pool sized for one sandbox per env deadlock (each
holds a site and waits for a browser). Warm reuse happens a level up instead: whole
stacks are pooled (`StackPool`), so containers live across episodes and envs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import threading
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, Playwright

from arborl.sandboxes import DockerBackend, Limits, Sandbox, SandboxSpec, SandboxStartError
from arborl.sandboxes.owner import owner_alive, owner_labels

from .relay import UnixRelay
from .sites import SITE_PORT, SiteDef
from .stack import SiteHandle, WebStack, connect_cdp, wait_for_site

log = logging.getLogger(__name__)

NETWORK_LABEL = "arborl.web_network"
SITE_DIR = "/opt/arborl-site"
RUN_DIR = "/run/arborl"  # the sandbox's bind-mounted run directory (docker backend)
CDP_PORT = 9222
_reaped = threading.Event()


def reap_networks(client: Any, all_networks: bool = False) -> list[str]:
    """Remove the web networks of dead harnesses (or all); returns their names."""
    removed = []
    for net in client.networks.list(filters={"label": NETWORK_LABEL}):
        if all_networks or not owner_alive(net.attrs.get("Labels") or {}):
            try:
                net.remove()
                removed.append(net.name)
            except Exception as e:  # still has containers: the sandbox reaper gets them first
                log.debug("cannot remove network %s yet: %s", net.name, e)
    return removed


class DockerStack(WebStack):
    kind = "docker"

    def __init__(
        self,
        playwright: Playwright,
        backend: DockerBackend,
        browser_image: str = "arborl/gui:latest",
        site_image: str = "arborl/base:latest",
        browser_limits: Limits | None = None,
        site_limits: Limits | None = None,
    ) -> None:
        super().__init__(playwright)
        if not isinstance(backend, DockerBackend):
            raise TypeError("DockerStack needs the Docker backend")
        self.backend = backend
        self.browser_image = browser_image
        self.site_image = site_image
        self.browser_limits = browser_limits or Limits(memory_mb=2048, pids=1024, tmp_mb=1024, cpus=2.0)
        self.site_limits = site_limits or Limits(memory_mb=256, pids=128, tmp_mb=32)
        self.network = f"arborl-web-{self.id}"
        self._net: Any = None
        self._net_lock = asyncio.Lock()
        self._browser_sb: Sandbox | None = None
        self._relay: UnixRelay | None = None
        self._profile = 0

    # ---- network ----------------------------------------------------------------------------
    async def _network(self) -> str:
        async with self._net_lock:  # sites start concurrently: create the network once
            if self._net is None:
                await self._create_network()
        return self.network

    async def _create_network(self) -> None:
        if self._net is None:
            client = self.backend.client
            if not _reaped.is_set():  # once per process, like a SandboxPool's start
                _reaped.set()
                orphans = await asyncio.to_thread(self.backend.reap)
                gone = await asyncio.to_thread(reap_networks, client)
                if orphans or gone:
                    log.info("removed %d orphaned sandboxes and %d web networks", len(orphans), len(gone))
            self._net = await asyncio.to_thread(
                client.networks.create,
                self.network,
                driver="bridge",
                internal=True,
                options={"com.docker.network.bridge.inhibit_ipv4": "true"},
                labels={NETWORK_LABEL: "1", **owner_labels()},
            )

    async def _create(self, spec: SandboxSpec) -> Sandbox:
        return await self.backend.create(spec, pool_id=f"web-{self.id}")

    def _run_dir(self, sb: Sandbox) -> Path:
        return Path(sb.channel.socket_path).parent

    async def _ip(self, sb: Sandbox) -> str:
        def read() -> str:
            sb.handle.reload()
            return str(sb.handle.attrs["NetworkSettings"]["Networks"][self.network]["IPAddress"])

        return await asyncio.to_thread(read)

    async def _sh(self, sb: Sandbox, cmd: str, root: bool = False) -> None:
        res = await sb.exec(cmd, user="root" if root else None, timeout=30, workdir="/")
        if not res.ok:
            raise SandboxStartError(f"`{cmd[:80]}` failed in {sb}: {res.output[-1000:]}")

    # ---- sites -----------------------------------------------------------------------------
    async def _start_site(self, site: SiteDef) -> SiteHandle:
        spec = SandboxSpec(
            image=self.site_image,
            network=await self._network(),
            files={f"{SITE_DIR}/{name}": text for name, text in site.sources().items()},
            limits=self.site_limits,
            reset_paths=(),
        )
        sb = await self._create(spec)
        try:
            await self._sh(sb, f"install -d -o {spec.user} -g {spec.user} {RUN_DIR}/site", root=True)
            await self._sh(
                sb,
                f"setsid -f python3 {SITE_DIR}/server.py {shlex.quote(site.name)} --port {SITE_PORT} "
                f"--admin-socket {RUN_DIR}/site/admin.sock >/tmp/site.log 2>&1",
            )
            sock = str(self._run_dir(sb) / "site" / "admin.sock")
            await wait_for_site(sock, 30.0)
            return SiteHandle(site, f"{await self._ip(sb)}:{SITE_PORT}", sock, sb)
        except BaseException:
            await sb.close()
            raise

    async def _stop_site(self, handle: SiteHandle) -> None:
        await handle.handle.close()

    # ---- browser -----------------------------------------------------------------------------
    async def _start_browser(self, args: list[str]) -> Browser:
        if self._browser_sb is not None and not await self.backend.is_running(self._browser_sb):
            log.info("web stack %s: the browser container died; starting another", self.id)
            await self._drop_browser_sandbox()
        if self._browser_sb is None:
            spec = SandboxSpec(
                image=self.browser_image,
                network=await self._network(),
                limits=self.browser_limits,
                reset_paths=(),
            )
            self._browser_sb = await self._create(spec)
            # DevTools listens on the container's loopback only; socat (root: it writes into
            # the root-owned run directory) publishes it as a unix socket to the host.
            await self._sh(
                self._browser_sb,
                f"setsid -f socat UNIX-LISTEN:{RUN_DIR}/cdp.sock,fork,mode=600,unlink-early "
                f"TCP:127.0.0.1:{CDP_PORT} >/tmp/socat.log 2>&1",
                root=True,
            )
            self._relay = await UnixRelay(str(self._run_dir(self._browser_sb) / "cdp.sock")).start()
        sb = self._browser_sb
        self._profile += 1
        argv = [
            "chromium",
            "--headless=new",
            f"--remote-debugging-port={CDP_PORT}",
            f"--user-data-dir=/tmp/chromium-{self._profile}",
            *args,
            "about:blank",
        ]
        await self._sh(sb, f"setsid -f {shlex.join(argv)} >/tmp/chromium.log 2>&1")

        async def died() -> str | None:
            if not await self.backend.is_running(sb):
                return await self.backend.describe_death(sb)
            res = await sb.exec("pgrep -x chromium >/dev/null || tail -c 2000 /tmp/chromium.log", timeout=10)
            return res.stdout.strip() or None

        assert self._relay is not None
        return await connect_cdp(self.playwright, self._relay.url, 30.0, died=died)

    async def _stop_browser(self) -> None:
        if self._browser_sb is not None:
            with contextlib.suppress(Exception):
                await self.kill_browser()

    async def kill_browser(self) -> None:
        if self._browser_sb is not None:
            await self._browser_sb.exec(
                "pkill -KILL -x chromium; while pgrep -x chromium >/dev/null; do sleep 0.02; done; "
                "rm -rf /tmp/chromium-*",
                user="root",
                timeout=15,
            )

    async def _drop_browser_sandbox(self) -> None:
        if self._relay is not None:
            await self._relay.close()
            self._relay = None
        sb, self._browser_sb = self._browser_sb, None
        if sb is not None:
            await sb.close()

    async def _teardown(self) -> None:
        await self._drop_browser_sandbox()
        if self._net is not None:
            await self._remove_network()

    async def _remove_network(self) -> None:
        # Docker may take a moment to release the removed containers' endpoints.
        for _ in range(100):
            try:
                await asyncio.to_thread(self._net.remove)
                self._net = None
                return
            except Exception as e:
                last = e
                await asyncio.sleep(0.1)
        log.warning("could not remove network %s (%s); the next start reaps it", self.network, last)
