"""A web stack: one worker's browser plus the sites its tasks use.

One browser per worker, one browser context per episode: a stack lives as long as its env
(or longer, in the `StackPool`), and an episode costs a site-state reset (one request per
site) and a fresh browser context, not a browser start.

The browser can reach the stack's sites and nothing else, in two layers:
- name resolution: `--host-resolver-rules` maps each `<site>.test` to its server and every
  other name, IP literals included, to NOTFOUND;
- per episode, the context's proxy is a dead address with only the task's sites bypassing
  it (and `<-loopback>`, which drops Chromium's implicit loopback bypass), so a page cannot
  reach another site of the same worker, the host, or the DevTools port.
The Docker stack adds a third layer, the network itself (see docker_stack.py).

This module holds the contract (`WebStack`) and what both implementations share; they are
`DockerStack` (docker_stack.py: browser and each site in their own sandbox container) and
`LocalStack` (local_stack.py: host processes, for machines without a container engine).
`StackPool` (stack_pool.py) keeps them warm across envs.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

from playwright.async_api import Browser, BrowserContext, Playwright

from arborl.sandboxes import SandboxError, SandboxStartError

from .relay import SiteRequestError, unix_http
from .sites import SiteDef, get_site

log = logging.getLogger(__name__)

#: Chromium flags for an unattended, quiet browser (no sync, updates or background fetches);
#: WebRTC may only use proxied UDP, i.e. none, so it cannot route around the proxy.
BROWSER_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    # A back navigation restored from the back-forward cache fires no load event, and
    # Playwright's go_back then waits for one until it times out.
    "--disable-back-forward-cache",
)


class BrowserCrashed(SandboxError):
    """The browser (or its container) is gone mid-episode; the next reset restarts it."""

    fatal = True


@dataclass
class SiteHandle:
    site: SiteDef
    address: str
    """host:port the browser's resolver maps the site's hostname to."""
    admin_socket: str
    """Host path of the site's admin socket."""
    handle: Any = None


class WebStack(abc.ABC):
    """A browser and the sites it may reach, for one worker at a time."""

    kind: ClassVar[str]

    def __init__(self, playwright: Playwright) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.playwright = playwright
        self.sites: dict[str, SiteHandle] = {}
        self.browser: Browser | None = None
        self.proxy = "http://127.0.0.1:9"
        self._browser_sites: tuple[str, ...] = ()
        self.closed = False
        self.starts = 0

    # ---- what implementations provide ----------------------------------------------------
    @abc.abstractmethod
    async def _start_site(self, site: SiteDef) -> SiteHandle: ...

    @abc.abstractmethod
    async def _stop_site(self, handle: SiteHandle) -> None: ...

    @abc.abstractmethod
    async def _start_browser(self, args: list[str]) -> Browser: ...

    @abc.abstractmethod
    async def _stop_browser(self) -> None:
        """Make sure no browser process of this stack is left."""

    @abc.abstractmethod
    async def kill_browser(self) -> None:
        """SIGKILL the browser, as a crash would (for tests)."""

    @abc.abstractmethod
    async def _teardown(self) -> None:
        """Free what is left once browser and sites are stopped."""

    # ---- lifecycle --------------------------------------------------------------------------
    def browser_alive(self) -> bool:
        return self.browser is not None and self.browser.is_connected()

    async def ensure(self, names: tuple[str, ...] | list[str]) -> None:
        """Start missing sites, and (re)start the browser if it is down or must learn new sites."""
        if self.closed:
            raise RuntimeError("this web stack is closed")
        missing = [n for n in dict.fromkeys(names) if n not in self.sites]
        if missing:
            handles = await asyncio.gather(
                *(self._start_site(get_site(n)) for n in missing), return_exceptions=True
            )
            for name, h in zip(missing, handles, strict=True):
                if isinstance(h, BaseException):
                    raise h
                self.sites[name] = h
        if not self.browser_alive() or tuple(self.sites) != self._browser_sites:
            await self.restart_browser()

    async def restart_browser(self) -> None:
        with contextlib.suppress(Exception):
            if self.browser is not None:
                await self.browser.close()
        self.browser = None
        await self._stop_browser()
        self.browser = await self._start_browser(self.browser_args())
        self._browser_sites = tuple(self.sites)
        self.starts += 1

    def resolver_rules(self) -> str:
        rules = [f"MAP {h.site.host} {h.address}" for h in self.sites.values()]
        return ", ".join([*rules, "MAP * ~NOTFOUND"])

    def browser_args(self) -> list[str]:
        hosts = ";".join(h.site.host for h in self.sites.values())
        return [
            *BROWSER_ARGS,
            f"--host-resolver-rules={self.resolver_rules()}",
            f"--proxy-server={self.proxy}",
            f"--proxy-bypass-list={hosts};<-loopback>",
        ]

    async def new_context(
        self, names: tuple[str, ...] | list[str], viewport: tuple[int, int]
    ) -> BrowserContext:
        """A fresh context that can reach only the named sites."""
        if self.browser is None:
            raise BrowserCrashed("the browser is not running")
        hosts = ",".join(self.sites[n].site.host for n in names)
        return await self.browser.new_context(
            viewport={"width": viewport[0], "height": viewport[1]},
            proxy={"server": self.proxy, "bypass": f"{hosts},<-loopback>"},
            service_workers="block",
        )

    async def reset_site(self, name: str) -> None:
        await unix_http(self.sites[name].admin_socket, "POST", "/reset")

    async def site_state(self, name: str) -> Any:
        return await unix_http(self.sites[name].admin_socket, "GET", "/state")

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            if self.browser is not None:
                await self.browser.close()
        self.browser = None
        steps = [
            self._stop_browser(),
            asyncio.gather(*(self._stop_site(h) for h in self.sites.values())),
        ]
        for step in (*steps, self._teardown()):
            try:
                await step
            except Exception as e:  # closing must finish: log and go on
                log.warning("web stack %s: cleanup step failed: %s", self.id, e)
        self.sites.clear()


async def wait_for_site(sock: str, timeout_s: float, died: Any = None) -> None:
    """Poll a site's admin socket until it answers `/ping`."""
    deadline = time.monotonic() + timeout_s
    while True:
        if os.path.exists(sock):
            try:
                await unix_http(sock, "GET", "/ping", timeout=2.0)
                return
            except SiteRequestError:
                pass
        if died is not None and (why := died()):
            raise SandboxStartError(f"site server exited: {why}")
        if time.monotonic() > deadline:
            raise SandboxStartError(f"site server did not answer on {sock} within {timeout_s:.0f}s")
        await asyncio.sleep(0.02)


async def connect_cdp(playwright: Playwright, url: str, timeout_s: float, died: Any = None) -> Browser:
    """Connect Playwright to a browser's DevTools endpoint, retrying while it starts."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            return await playwright.chromium.connect_over_cdp(url, timeout=5000)
        except Exception as e:
            last = e
        if died is not None and (why := await died()):
            raise SandboxStartError(f"the browser exited while starting: {why}")
        await asyncio.sleep(0.05)
    raise SandboxStartError(f"no browser answered on {url} within {timeout_s:.0f}s: {last}")
