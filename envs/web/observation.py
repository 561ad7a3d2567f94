"""What the agent sees of a page: URL, title, the last action's error, and a pruned
accessibility tree in which every element carries a stable id; optionally a screenshot.

The tree is Playwright's own AI snapshot (`page.aria_snapshot(mode="ai")`): the browser's
accessibility roles and names, hidden and presentational nodes pruned, and a `[ref=eN]` id
on each element. BrowserGym gets the same effect by writing a `bid` attribute into every
element and reading Chromium's AX tree over CDP; Playwright keeps the ids on the elements
itself, so an element keeps its id from one snapshot to the next while it stays on the
page, and `aria-ref=eN` finds it again for the action. Ids restart at each new document.

    URL: http://shop.test/search?q=mouse
    Title: Search - Arborl Shop
    Last action error: no element with id e99 on the current page; ...

    - navigation "Main" [ref=e2]:
      - link "Home" [ref=e3] [cursor=pointer]:
        - /url: /
      ...
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from .actions import is_browser_gone

TRUNCATED = "\n[... page snapshot truncated at {n} characters ...]"


@dataclass(frozen=True)
class PageView:
    """One observation of a page."""

    url: str
    title: str
    snapshot: str
    error: str | None = None

    def text(self, max_chars: int = 24_000) -> str:
        head = f"URL: {self.url}\nTitle: {self.title}\n"
        if self.error:
            head += f"Last action error: {self.error}\n"
        snap = self.snapshot
        if len(snap) > max_chars:
            snap = snap[:max_chars] + TRUNCATED.format(n=max_chars)
        return f"{head}\n{snap}"


async def observe(page: Page, error: str | None = None, timeout_ms: float = 5000) -> PageView:
    """Read the page; a page that cannot be read says so in the snapshot instead of raising
    (browser-gone errors are re-raised for the caller to treat as a crash)."""
    try:
        title = await page.title()
        snapshot = await page.aria_snapshot(mode="ai", timeout=timeout_ms)
    except PlaywrightError as e:
        if is_browser_gone(e):
            raise
        title, snapshot = "", f"(the page could not be read: {str(e).splitlines()[0] if str(e) else e})"
    return PageView(url=page.url, title=title, snapshot=snapshot or "(empty page)", error=error)


async def screenshot(page: Page, height: int, width: int) -> np.ndarray:
    """The viewport as uint8 [height, width, 3]; black where the page cannot be captured."""
    from PIL import Image

    try:
        png = await page.screenshot(type="png", timeout=5000)
        img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.uint8)
    except (PlaywrightError, OSError, ValueError):
        return blank(height, width)
    if img.shape != (height, width, 3):  # a device scale factor or odd viewport: fit the space
        out = blank(height, width)
        h, w = min(height, img.shape[0]), min(width, img.shape[1])
        out[:h, :w] = img[:h, :w]
        return out
    return img


def blank(height: int, width: int) -> np.ndarray:
    return np.zeros((height, width, 3), dtype=np.uint8)
