"""pyautogui-style actions in a model's reply, parsed safely and turned into xdotool commands.

The model answers as OSWorld's `pyautogui` action space asks: Python calls in a code block,
or one of the special actions WAIT, DONE, FAIL:

    ```python
    pyautogui.click(512, 300)
    pyautogui.write('hello world')
    pyautogui.hotkey('ctrl', 's')
    ```

The reply is never executed. It is parsed with `ast`; only calls of the functions below with
literal arguments are accepted (imports of pyautogui/time are ignored), bound against
pyautogui's own signatures, and checked (coordinates on the screen, known keys, sane counts).
Anything else is an `ActionError` whose message the model can read and act on.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

SPECIAL = ("WAIT", "DONE", "FAIL")
MAX_ACTIONS = 64
MAX_TEXT = 10_000
MAX_REPEAT = 100
BUTTONS = {"left": 1, "middle": 2, "right": 3, "primary": 1, "secondary": 3}


class ActionError(ValueError):
    """The reply holds no valid action; the message says what to fix."""


@dataclass(frozen=True)
class Action:
    """One parsed action: `name` is a pyautogui function or WAIT/DONE/FAIL."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def special(self) -> bool:
        return self.name in SPECIAL


# ---- pyautogui's signatures (the subset executed); only `inspect.signature` reads them -----
# Binding the model's arguments to these gives pyautogui's own defaults and its error
# messages ("click() got an unexpected keyword argument 'foo'") for free.
A = Any


def click(
    x: A = None, y: A = None, clicks: A = 1, interval: A = 0.0, button: A = "left", duration: A = 0.0
) -> None: ...
def doubleClick(
    x: A = None, y: A = None, interval: A = 0.0, button: A = "left", duration: A = 0.0
) -> None: ...
def tripleClick(
    x: A = None, y: A = None, interval: A = 0.0, button: A = "left", duration: A = 0.0
) -> None: ...
def rightClick(x: A = None, y: A = None, interval: A = 0.0, duration: A = 0.0) -> None: ...
def middleClick(x: A = None, y: A = None, interval: A = 0.0, duration: A = 0.0) -> None: ...
def moveTo(x: A = None, y: A = None, duration: A = 0.0) -> None: ...
def move(xOffset: A = 0, yOffset: A = 0, duration: A = 0.0) -> None: ...
def dragTo(x: A = None, y: A = None, duration: A = 0.0, button: A = "left") -> None: ...
def drag(xOffset: A = 0, yOffset: A = 0, duration: A = 0.0, button: A = "left") -> None: ...
def mouseDown(x: A = None, y: A = None, button: A = "left", duration: A = 0.0) -> None: ...
def mouseUp(x: A = None, y: A = None, button: A = "left", duration: A = 0.0) -> None: ...
def scroll(clicks: A, x: A = None, y: A = None) -> None: ...
def hscroll(clicks: A, x: A = None, y: A = None) -> None: ...
def write(message: A, interval: A = 0.0) -> None: ...
def press(keys: A, presses: A = 1, interval: A = 0.0) -> None: ...
def hotkey(*args: A, interval: A = 0.0) -> None: ...
def keyDown(key: A) -> None: ...
def keyUp(key: A) -> None: ...
def sleep(seconds: A) -> None: ...


_FUNCS = {
    f.__name__: inspect.signature(f)
    for f in (
        *(click, doubleClick, tripleClick, rightClick, middleClick, moveTo, move, dragTo, drag),
        *(mouseDown, mouseUp, scroll, hscroll, write, press, hotkey, keyDown, keyUp, sleep),
    )
}
_ALIASES = {
    "typewrite": "write",
    "moveRel": "move",
    "dragRel": "drag",
    "vscroll": "scroll",
    "keyPress": "press",
}
SUPPORTED = tuple(sorted({*_FUNCS, *_ALIASES}))

# ---- keys: pyautogui names -> X keysyms ---------------------------------------------------
_KEYSYMS = {
    "enter": "Return", "return": "Return", "\n": "Return", "\r": "Return", "tab": "Tab", "\t": "Tab",
    "esc": "Escape", "escape": "Escape", "backspace": "BackSpace", "delete": "Delete", "del": "Delete",
    "space": "space", "up": "Up", "down": "Down", "left": "Left", "right": "Right", "home": "Home",
    "end": "End", "pageup": "Prior", "pgup": "Prior", "pagedown": "Next", "pgdn": "Next",
    "insert": "Insert", "ctrl": "Control_L", "ctrlleft": "Control_L", "ctrlright": "Control_R",
    "control": "Control_L", "shift": "Shift_L", "shiftleft": "Shift_L", "shiftright": "Shift_R",
    "alt": "Alt_L", "altleft": "Alt_L", "altright": "Alt_R", "option": "Alt_L", "win": "Super_L",
    "winleft": "Super_L", "winright": "Super_R", "super": "Super_L", "command": "Super_L",
    "cmd": "Super_L", "meta": "Super_L", "capslock": "Caps_Lock", "numlock": "Num_Lock",
    "scrolllock": "Scroll_Lock", "printscreen": "Print", "print": "Print", "prtsc": "Print",
    "prtscr": "Print", "prntscrn": "Print", "pause": "Pause", "menu": "Menu", "apps": "Menu",
    "clear": "Clear", "help": "Help", "volumeup": "XF86AudioRaiseVolume",
    "volumedown": "XF86AudioLowerVolume", "volumemute": "XF86AudioMute",
    "add": "KP_Add", "subtract": "KP_Subtract", "multiply": "KP_Multiply", "divide": "KP_Divide",
    "decimal": "KP_Decimal",
    " ": "space", "!": "exclam", '"': "quotedbl", "#": "numbersign", "$": "dollar", "%": "percent",
    "&": "ampersand", "'": "apostrophe", "(": "parenleft", ")": "parenright", "*": "asterisk",
    "+": "plus", ",": "comma", "-": "minus", ".": "period", "/": "slash", ":": "colon",
    ";": "semicolon", "<": "less", "=": "equal", ">": "greater", "?": "question", "@": "at",
    "[": "bracketleft", "\\": "backslash", "]": "bracketright", "^": "asciicircum",
    "_": "underscore", "`": "grave", "{": "braceleft", "|": "bar", "}": "braceright", "~": "asciitilde",
}  # fmt: skip
_KEYSYMS.update({f"f{i}": f"F{i}" for i in range(1, 25)})
_KEYSYMS.update({f"num{i}": f"KP_{i}" for i in range(10)})
#: X keysym names a model may also use directly (xdotool's own vocabulary).
_X_NAMES = {v.lower(): v for v in _KEYSYMS.values()} | {"kp_enter": "KP_Enter"}


def keysym(key: Any) -> str:
    """The X keysym xdotool should press for a pyautogui key name (raises ActionError)."""
    if not isinstance(key, str) or not key:
        raise ActionError(f"a key must be a non-empty string, got {key!r}")
    if len(key) == 1:
        if key in _KEYSYMS:
            return _KEYSYMS[key]
        if key.isascii() and key.isalnum():
            return key
        return f"U{ord(key):04X}"  # any other character, by its Unicode keysym
    low = key.lower()
    if low in _KEYSYMS:
        return _KEYSYMS[low]
    if low in _X_NAMES:
        return _X_NAMES[low]
    close = difflib.get_close_matches(low, list(_KEYSYMS), n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ActionError(f"unknown key {key!r}{hint}")


# ---- parsing -------------------------------------------------------------------------------
_THINK = re.compile(r"^.*</think>", re.DOTALL)
_BLOCK = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)


def parse_actions(reply: str, width: int, height: int) -> list[Action]:
    """The actions in a model reply, validated for a `width` x `height` screen.

    Code blocks are read in order; without one, the whole reply is read as code. A reply
    that is just WAIT, DONE or FAIL is that special action. Raises `ActionError`.
    """
    text = _THINK.sub("", reply).strip()
    if text in SPECIAL:
        return [Action(text)]
    blocks = _BLOCK.findall(text)
    sources = blocks if blocks else [text]
    actions: list[Action] = []
    for src in sources:
        actions.extend(_parse_code(src.strip(), width, height, whole_reply=not blocks))
    if not actions:
        raise ActionError(
            "no action found: reply with pyautogui calls in a ```python code block "
            "(e.g. pyautogui.click(100, 200)), or with WAIT, DONE or FAIL"
        )
    if len(actions) > MAX_ACTIONS:
        raise ActionError(f"{len(actions)} actions in one reply; at most {MAX_ACTIONS} are allowed")
    return actions


def _parse_code(src: str, width: int, height: int, whole_reply: bool) -> list[Action]:
    if src in SPECIAL:
        return [Action(src)]
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        if whole_reply:
            raise ActionError(
                "no action found: put pyautogui calls in a ```python code block "
                "(e.g. pyautogui.click(100, 200)), or reply WAIT, DONE or FAIL"
            ) from None
        raise ActionError(f"the code block is not valid Python (line {e.lineno}: {e.msg})") from None
    actions = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            continue  # `import pyautogui`, `import time`: the names are known already
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Name) and stmt.value.id in SPECIAL:
            actions.append(Action(stmt.value.id))
            continue
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            raise ActionError(
                f"line {stmt.lineno}: only pyautogui calls are accepted, not `{_snippet(stmt)}` "
                "(no variables, loops or other Python)"
            )
        actions.append(_parse_call(stmt.value, width, height))
    return actions


def _snippet(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _func_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
        return None
    owner = node.value.id
    return (
        node.attr if owner in ("pyautogui", "pg", "gui") or (owner, node.attr) == ("time", "sleep") else None
    )


def _literal(node: ast.expr, lineno: int) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        raise ActionError(
            f"line {lineno}: arguments must be literal values, not `{_snippet(node)}`"
        ) from None


def _parse_call(call: ast.Call, width: int, height: int) -> Action:
    line = call.lineno
    name = _func_name(call.func)
    if name in SPECIAL:
        return Action(name)
    name = _ALIASES.get(name or "", name)
    if name not in _FUNCS:
        close = difflib.get_close_matches(str(name), SUPPORTED, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ActionError(
            f"line {line}: `{_snippet(call.func)}` is not a supported action{hint}; supported: "
            f"pyautogui.{', pyautogui.'.join(SUPPORTED)}, time.sleep, WAIT, DONE, FAIL"
        )
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise ActionError(f"line {line}: *args and **kwargs are not accepted")
    args = [_literal(a, line) for a in call.args]
    kwargs = {k.arg: _literal(k.value, line) for k in call.keywords if k.arg is not None}
    try:
        bound = _FUNCS[name].bind(*args, **kwargs)
    except TypeError as e:
        raise ActionError(f"line {line}: {name}(): {e}") from None
    bound.apply_defaults()
    values = dict(bound.arguments)
    if name == "hotkey":
        values["keys"] = list(values.pop("args"))
    _check(name, values, line, width, height)
    return Action(name, values)


def _number(value: Any, what: str, line: int) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ActionError(f"line {line}: {what} must be a number, got {value!r}")
    return float(value)


def _check(name: str, v: dict[str, Any], line: int, width: int, height: int) -> None:
    """Validate and normalise the bound arguments in place."""
    if "x" in v and isinstance(v["x"], tuple | list) and len(v["x"]) == 2 and v.get("y") is None:
        v["x"], v["y"] = v["x"]  # pyautogui.click((x, y))
    if "x" in v:
        if (v["x"] is None) != (v["y"] is None):
            raise ActionError(f"line {line}: {name}() needs both x and y, or neither")
        if v["x"] is not None:
            x, y = _number(v["x"], "x", line), _number(v["y"], "y", line)
            if not (0 <= x < width and 0 <= y < height):
                raise ActionError(
                    f"line {line}: ({x:g}, {y:g}) is outside the {width}x{height} screen "
                    f"(x in 0..{width - 1}, y in 0..{height - 1})"
                )
            v["x"], v["y"] = round(x), round(y)
    for key in ("xOffset", "yOffset"):
        if key in v:
            v[key] = round(_number(v[key], key, line))
    for key in ("interval", "duration", "seconds"):
        if key in v:
            v[key] = _number(v[key], key, line)
            if v[key] < 0:
                raise ActionError(f"line {line}: {key} must not be negative")
    for key in ("clicks", "presses"):
        if key in v:
            n = _number(v[key], key, line)
            if n != int(n) or abs(n) > MAX_REPEAT or (key == "presses" and n < 0):
                raise ActionError(
                    f"line {line}: {key} must be a whole number up to {MAX_REPEAT}, got {v[key]!r}"
                )
            v[key] = int(n)
    if "button" in v and v["button"] not in BUTTONS:
        raise ActionError(f"line {line}: button must be one of {sorted(BUTTONS)}, got {v['button']!r}")
    if name == "write":
        msg = v["message"]
        if isinstance(msg, list | tuple):
            v["keys"] = [keysym(k) for k in msg]  # typewrite(['a', 'enter']) presses keys
        elif not isinstance(msg, str):
            raise ActionError(f"line {line}: write() takes a string, got {msg!r}")
        elif len(msg) > MAX_TEXT:
            raise ActionError(f"line {line}: write() text is {len(msg)} characters; at most {MAX_TEXT}")
    if name == "press":
        keys = v["keys"] if isinstance(v["keys"], list | tuple) else [v["keys"]]
        v["keys"] = [keysym(k) for k in keys]
    if name == "hotkey":
        if not v["keys"]:
            raise ActionError(f"line {line}: hotkey() needs at least one key")
        v["keys"] = [keysym(k) for k in v["keys"]]
    if name in ("keyDown", "keyUp"):
        v["key"] = keysym(v["key"])


# ---- execution: xdotool command lines -----------------------------------------------------
TYPE_DELAY_MS = 5


def _xdo(*args: Any) -> str:
    return shlex.join(["xdotool", *(str(a) for a in args)])


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def _to(v: dict[str, Any]) -> list[str]:
    return [_xdo("mousemove", v["x"], v["y"])] if v.get("x") is not None else []


def to_commands(action: Action, max_wait_s: float = 10.0) -> list[str]:
    """Shell lines that perform `action` with xdotool (special actions give none)."""
    v, n = action.args, action.name
    if action.special:
        return []
    if n in ("click", "doubleClick", "tripleClick", "rightClick", "middleClick"):
        clicks = {"doubleClick": 2, "tripleClick": 3}.get(n, v.get("clicks", 1))
        button = {"rightClick": 3, "middleClick": 2}.get(n) or BUTTONS[v.get("button", "left")]
        if clicks <= 0:
            return _to(v)
        # xdotool sleeps `--delay` after every click, also the last: keep it 0 for one click.
        delay = (_ms(v.get("interval", 0.0)) or 40) if clicks > 1 else 0
        return [*_to(v), _xdo("click", "--repeat", clicks, "--delay", delay, button)]
    if n == "moveTo":
        return _to(v)
    if n == "move":
        return [_xdo("mousemove_relative", "--", v["xOffset"], v["yOffset"])]
    if n in ("dragTo", "drag"):
        return _drag_lines(v, BUTTONS[v["button"]], relative=n == "drag")
    if n in ("mouseDown", "mouseUp"):
        return [*_to(v), _xdo("mousedown" if n == "mouseDown" else "mouseup", BUTTONS[v["button"]])]
    if n in ("scroll", "hscroll"):
        clicks = v["clicks"]
        # pyautogui: positive scrolls up (X button 4) or right (X button 7)
        button = {("scroll", True): 4, ("scroll", False): 5, ("hscroll", True): 7, ("hscroll", False): 6}[
            (n, clicks > 0)
        ]
        if clicks == 0:
            return _to(v)
        return [*_to(v), _xdo("click", "--repeat", abs(clicks), "--delay", 10, button)]
    if n == "write":
        if "keys" in v:
            return [_xdo("key", "--delay", _ms(v["interval"]) or 10, "--", *v["keys"])] if v["keys"] else []
        return _type_lines(v["message"], _ms(v["interval"]) or TYPE_DELAY_MS)
    if n == "press":
        if not v["keys"] or v["presses"] == 0:
            return []
        delay = _ms(v["interval"]) or 10
        return [_xdo("key", "--repeat", v["presses"], "--delay", delay, "--", *v["keys"])]
    if n == "hotkey":
        return [_xdo("key", "--", "+".join(v["keys"]))]
    if n in ("keyDown", "keyUp"):
        return [_xdo(n.lower(), "--", v["key"])]
    if n == "sleep":
        return [f"sleep {min(v['seconds'], max_wait_s):.3f}"]
    raise AssertionError(f"unhandled action {n}")


def _drag_lines(v: dict[str, Any], button: int, relative: bool) -> list[str]:
    """Press, move in five hops, release: window managers and apps start a drag only after
    motion events with the button down, and a single jump gives them one event at best."""
    if relative:
        target = f"TX=$((X + {v['xOffset']})); TY=$((Y + {v['yOffset']}))"
    elif v["x"] is not None:
        target = f"TX={v['x']}; TY={v['y']}"
    else:
        target = "TX=$X; TY=$Y"
    return [
        "eval $(xdotool getmouselocation --shell)",
        target,
        _xdo("mousedown", button),
        "for i in 1 2 3 4 5; do xdotool mousemove -- $((X + (TX - X) * i / 5)) $((Y + (TY - Y) * i / 5)); "
        "sleep 0.02; done",
        _xdo("mouseup", button),
    ]


def _type_lines(text: str, delay_ms: int) -> list[str]:
    """`xdotool type` ignores newlines and tabs in GTK apps: press Return/Tab for them."""
    lines = []
    for chunk in re.split(r"(\r\n|\n|\r|\t)", text):
        if chunk in ("\n", "\r\n", "\r"):
            lines.append(_xdo("key", "Return"))
        elif chunk == "\t":
            lines.append(_xdo("key", "Tab"))
        elif chunk:
            # A character outside the keymap makes xdotool remap a spare keycode first; an app
            # that has not yet seen the new mapping drops the key ('héllo' came out 'hllo' under
            # load). Such characters go one at a time, with time for the mapping to land.
            for run in re.findall(r"[\x00-\x7f]+|[^\x00-\x7f]", chunk):
                if run.isascii():
                    lines.append(_xdo("type", "--delay", delay_ms, "--", run))
                else:
                    lines += [
                        "sleep 0.05",
                        _xdo("type", "--delay", max(delay_ms, 50), "--", run),
                        "sleep 0.05",
                    ]
    return lines


def describe(action: Action) -> str:
    """A short human-readable form, for observations and logs."""
    if action.special:
        return action.name
    shown = {k: v for k, v in action.args.items() if v is not None and k not in ("duration",)}
    if "message" in shown and isinstance(shown["message"], str) and len(shown["message"]) > 40:
        shown["message"] = shown["message"][:37] + "..."
    return f"{action.name}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"
