"""The web env's action language: parse the model's reply, run the action with Playwright.

    click(e12)            fill(e7, "wireless mouse")      select(e9, "Audio")
    hover(e4)             press("Enter") / press(e7, "Enter")
    scroll(down)          goto("http://shop.test/cart")   go_back()
    answer("$529.00")

Ids are the `[ref=eN]` marks of the accessibility snapshot (`e12`, or just `12`). The
reply may hold reasoning; its last action call is the action (after any `</think>`).
Arguments are read with Python's own parser (`ast`), never evaluated. Anything wrong (no
action, an unknown one, bad arguments, an id not on the page, an element that cannot take
the action) raises `ActionError`, whose message the model reads in the next observation.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

#: action name → its parameters (a trailing `?` marks an optional leading id for `press`).
SIGNATURES: dict[str, tuple[str, ...]] = {
    "click": ("id",),
    "fill": ("id", "text"),
    "select": ("id", "option"),
    "hover": ("id",),
    "press": ("key",),
    "scroll": ("direction",),
    "goto": ("url",),
    "go_back": (),
    "answer": ("text",),
}
DIRECTIONS = ("up", "down", "left", "right")
HELP = (
    "Reply with one action: click(id), fill(id, text), select(id, option), hover(id), press(key), "
    "scroll(up|down|left|right), goto(url), go_back(), or answer(text) when you are done."
)
_CALL = re.compile(r"(?<![\w.])(" + "|".join(SIGNATURES) + r")\s*\(")
_ID = re.compile(r"^\[?(?:ref=)?(?P<id>(?:f\d+)?e\d+|\d+)\]?$")
_MAX_CLOSE_TRIES = 64


class ActionError(ValueError):
    """The action cannot be run; the message is shown to the model."""


@dataclass(frozen=True)
class Action:
    name: str
    args: dict[str, str]

    def __str__(self) -> str:
        inner = ", ".join(repr(v) if k not in ("id", "direction") else v for k, v in self.args.items())
        return f"{self.name}({inner})"


def _value(node: ast.expr) -> str:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str | int | float)
        and not isinstance(node.value, bool)
    ):
        return str(node.value)
    if isinstance(node, ast.Name):  # bare ids and directions: click(e12), scroll(down)
        return node.id
    if isinstance(node, ast.List) and len(node.elts) == 1:  # click([e12])
        return _value(node.elts[0])
    raise ActionError(f"arguments must be ids, numbers or quoted strings, not `{ast.unparse(node)}`")


def _parse_call(text: str, start: int) -> ast.Call | None:
    closes = [i for i, c in enumerate(text[start:], start) if c == ")"][:_MAX_CLOSE_TRIES]
    for end in closes:
        try:
            tree = ast.parse(text[start : end + 1].strip(), mode="eval")
        except (SyntaxError, ValueError):
            continue
        if isinstance(tree.body, ast.Call) and isinstance(tree.body.func, ast.Name):
            return tree.body
    return None


def _literal_call(call: ast.Call | None) -> bool:
    if call is None:
        return False
    try:
        for node in [*call.args, *(kw.value for kw in call.keywords)]:
            _value(node)
    except ActionError:
        return False
    return True


def normalize_id(raw: str) -> str:
    m = _ID.match(raw.strip())
    if m is None:
        raise ActionError(
            f"`{raw}` is not an element id; ids look like e12 (the [ref=e12] marks on the page)"
        )
    return m.group("id")  # a bare number stays one: `resolve_ids` finds it on the page


def parse_action(reply: str) -> Action:
    """The last action call in `reply`, with its arguments checked; ActionError otherwise."""
    text = reply.rsplit("</think>", 1)[-1]
    calls = list(_CALL.finditer(text))
    if not calls:
        raise ActionError(f"no action found in your reply. {HELP}")
    m = calls[-1]
    name = m.group(1)
    call = _parse_call(text, m.start())
    if name in ("answer", "goto") and not _literal_call(call):  # free text: answer(It is $529)
        end = text.rfind(")")
        raw = text[m.end() : end if end >= m.end() else len(text)].strip().strip("\"'").strip()
        return Action(name, {SIGNATURES[name][0]: raw})
    if call is None:
        raise ActionError(
            f"could not read the arguments of `{text[m.start() : m.start() + 80].strip()}`. {HELP}"
        )
    params = SIGNATURES[name]
    args = [_value(a) for a in call.args]
    if name == "press" and len(args) == 2:  # press(id, key): press a key in an element
        params = ("id", "key")
    names = [kw.arg for kw in call.keywords if kw.arg]
    if len(names) != len(set(names)):
        raise ActionError(f"{name}: an argument is given twice in `{ast.unparse(call)}`")
    kwargs = {kw.arg: _value(kw.value) for kw in call.keywords if kw.arg}
    if len(args) > len(params) or any(k not in params for k in kwargs):
        raise ActionError(f"{name} takes ({', '.join(params)}), got `{ast.unparse(call)}`")
    values = dict(zip(params, args, strict=False))
    for key, value in kwargs.items():
        if key in values:
            raise ActionError(f"{name}: `{key}` given twice")
        values[key] = value
    if name == "answer":  # answer() with nothing to say is giving up, not a format error
        values.setdefault("text", "")
    missing = [p for p in params if p not in values]
    if missing:
        raise ActionError(f"{name} needs ({', '.join(params)}); missing {', '.join(missing)}")
    if "id" in values:
        values["id"] = normalize_id(values["id"])
    if name == "scroll" and values["direction"].lower() not in DIRECTIONS:
        raise ActionError(
            f"scroll direction must be one of {', '.join(DIRECTIONS)}, got `{values['direction']}`"
        )
    if name == "scroll":
        values["direction"] = values["direction"].lower()
    return Action(name, values)


def resolve_ids(action: Action, snapshot: str) -> Action:
    """`click(12)` means the element shown as [ref=e12] (or [ref=f3e12] on a later document)."""
    ref = action.args.get("id", "")
    if not ref.isdigit():
        return action
    m = re.search(rf"\[ref=((?:f\d+)?e{ref})\]", snapshot)
    return Action(action.name, {**action.args, "id": m.group(1) if m else f"e{ref}"})


def _first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return re.sub(r"^(Locator|Page|Frame|Keyboard|Mouse)\.\w+: ", "", msg)


async def _element(page: Page, ref: str) -> Any:
    loc = page.locator(f"aria-ref={ref}")
    try:
        found = await loc.count()
    except PlaywrightError as e:
        if "closed" in str(e):
            raise
        found = 0
    if not found:
        raise ActionError(
            f"no element with id {ref} on the current page; use an id from the latest page snapshot"
        )
    return loc


async def _select(page: Page, ref: str, option: str, timeout_ms: float) -> None:
    loc = await _element(page, ref)
    options = await loc.evaluate(
        "el => el.tagName === 'SELECT' ? Array.from(el.options).map(o => [o.label.trim(), o.value]) : null"
    )
    if options is None:
        raise ActionError(f"element {ref} is not a drop-down list (select); use click or fill on it")
    want = option.strip().lower()
    for label, value in options:
        if want in (label.lower(), value.lower()):
            await loc.select_option(value=value, timeout=timeout_ms)
            return
    labels = ", ".join(repr(label) for label, _ in options)
    raise ActionError(f"{ref} has no option {option!r}; its options are {labels}")


async def execute(
    page: Page, action: Action, timeout_ms: float = 3000, nav_timeout_ms: float = 10000
) -> None:
    """Run a parsed action (not `answer`) on `page`; ActionError says what went wrong.

    Playwright errors that mean the browser is gone are re-raised as they are (the caller
    treats them as a crashed browser); every other failure becomes an ActionError.
    """
    a, name = action.args, action.name
    try:
        if name == "click":
            await (await _element(page, a["id"])).click(timeout=timeout_ms)
        elif name == "fill":
            await (await _element(page, a["id"])).fill(a["text"], timeout=timeout_ms)
        elif name == "select":
            await _select(page, a["id"], a["option"], timeout_ms)
        elif name == "hover":
            await (await _element(page, a["id"])).hover(timeout=timeout_ms)
        elif name == "press":
            if "id" in a:
                await (await _element(page, a["id"])).press(a["key"], timeout=timeout_ms)
            else:
                await page.keyboard.press(a["key"])
        elif name == "scroll":
            dx, dy = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}[a["direction"]]
            await page.evaluate(
                "([dx, dy]) => window.scrollBy(dx * window.innerWidth * 0.8, dy * window.innerHeight * 0.8)",
                [dx, dy],
            )
        elif name == "goto":
            url = a["url"].strip()
            if "://" not in url:
                url = "http://" + url
            await page.goto(url, wait_until="domcontentloaded", timeout=nav_timeout_ms)
        elif name == "go_back":
            before = page.url
            resp = await page.go_back(wait_until="domcontentloaded", timeout=nav_timeout_ms)
            if page.url == "about:blank":  # the tab's initial blank page is not part of the task
                await page.go_forward(wait_until="domcontentloaded", timeout=nav_timeout_ms)
                raise ActionError("there is no previous page to go back to")
            if resp is None and page.url == before:
                raise ActionError("there is no previous page to go back to")
        else:
            raise ActionError(f"{name} cannot be run on the page")
        await settle(page, nav_timeout_ms)
    except ActionError:
        raise
    except PlaywrightError as e:
        if is_browser_gone(e):
            raise
        raise ActionError(f"{action} failed: {_first_line(e)}") from e


async def settle(page: Page, timeout_ms: float) -> None:
    """Wait for a navigation the action started (a link, a submitted form) to load."""
    try:
        await page.wait_for_load_state("domcontentloaded", timeout=timeout_ms)
    except PlaywrightError as e:
        if is_browser_gone(e):
            raise


def is_browser_gone(e: BaseException) -> bool:
    """Whether a Playwright error means the page, context or browser no longer exists."""
    text = str(e)
    return type(e).__name__ == "TargetClosedError" or "has been closed" in text or "Browser closed" in text
