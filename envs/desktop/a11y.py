"""The accessibility tree of the desktop (AT-SPI), OSWorld's `a11y_tree` observation.

    display = XDisplay(a11y=True)          # a D-Bus session bus + AT-SPI's bus in the sandbox
    xml = await read_tree(sandbox, display.env)
    table = linearize(xml)                  # what a text-only model reads

The sandbox runs a D-Bus session bus and AT-SPI's bus launcher and registry (at-spi2-core);
GTK apps find them through `DBUS_SESSION_BUS_ADDRESS` and register through their ATK bridge.
`TREE_SCRIPT` walks the registry with pyatspi (Debian's python3-pyatspi) inside the sandbox
and prints XML in OSWorld's form: one element per accessible named by its role (`push-button`,
`text`, ...), with `name`, the states (`st:focused="true"`), the object attributes (`attr:`),
its screen position and size (`cp:screencoord="(x, y)"`, `cp:size="(w, h)"`) and its text.
Only showing, visible objects are listed (as OSWorld's observation filter does), at most
`MAX_NODES` of them, each name, attribute and text cut short, at most `MAX_DEPTH` deep.
X-only programs (xterm, openbox's frames) have no accessible objects.

The script runs as the harness's own Python (`trusted.run_python`: as the desktop user, whose
apps alone AT-SPI lets read them, but execute-only, isolated and in `/`), so the agent can
neither replace what it prints nor trace it. What the tree says is what the apps, the agent's
processes, tell AT-SPI: an agent that serves its own accessible objects shapes the tree, as in
OSWorld, where the agent's apps are the tree too.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ..sandboxed import TimedSandbox
from .trusted import run_python

ST = "https://accessibility.ubuntu.example.org/ns/state"
ATTR = "https://accessibility.ubuntu.example.org/ns/attributes"
CP = "https://accessibility.ubuntu.example.org/ns/component"
MAX_NODES = 3000
MAX_TEXT = 500
MAX_ATTRS = 64
MAX_DEPTH = 200
MAX_TREE_BYTES = 16 << 20  # the most the harness reads; a larger tree is OutputTooLarge

#: Runs in the sandbox (python3 with pyatspi); prints the tree as XML on stdout.
TREE_SCRIPT = f"""
import sys, xml.etree.ElementTree as ET
import pyatspi
ST, ATTR, CP = {ST!r}, {ATTR!r}, {CP!r}
MAX_NODES, MAX_TEXT, MAX_ATTRS, MAX_DEPTH = {MAX_NODES}, {MAX_TEXT}, {MAX_ATTRS}, {MAX_DEPTH}
count = 0

def state_names(node):
    try:
        return [pyatspi.stateToString(s) for s in node.getState().getStates()]
    except Exception:
        return []

def element(node, depth):
    global count
    states = state_names(node)
    role = (node.getRoleName() or "unknown").replace(" ", "-")[:64]
    if not role.replace("-", "").isalnum():
        role = "unknown"
    if depth > MAX_DEPTH or (depth > 1 and ("showing" not in states or "visible" not in states)):
        return None
    count += 1
    e = ET.Element(role, {{"name": (node.name or "")[:MAX_TEXT]}})
    for s in states:
        e.set("{{%s}}%s" % (ST, s.replace(" ", "-")), "true")
    try:
        for kv in node.getAttributes()[:MAX_ATTRS]:
            k, _, v = kv.partition(":")
            if k.replace("-", "").replace("_", "").isalnum() and len(k) <= 64:
                e.set("{{%s}}%s" % (ATTR, k), v[:MAX_TEXT])
    except Exception:
        pass
    try:
        c = node.queryComponent()
        x, y, w, h = c.getExtents(pyatspi.DESKTOP_COORDS)
        e.set("{{%s}}screencoord" % CP, "(%d, %d)" % (x, y))
        e.set("{{%s}}size" % CP, "(%d, %d)" % (w, h))
    except Exception:
        pass
    try:
        t = node.queryText()
        # a terminal's whole text (what vm_terminal_output reads), other text cut short
        e.text = t.getText(0, min(t.characterCount, 1 << 16 if role == "terminal" else MAX_TEXT))
    except Exception:
        pass
    for i in range(min(node.childCount, 500)):
        if count >= MAX_NODES:
            break
        try:
            child = node.getChildAtIndex(i)
        except Exception:
            continue
        if child is not None:
            sub = element(child, depth + 1)
            if sub is not None:
                e.append(sub)
    return e

ET.register_namespace("st", ST); ET.register_namespace("attr", ATTR); ET.register_namespace("cp", CP)
root = ET.Element("desktop-frame", {{"name": "main"}})
desktop = pyatspi.Registry.getDesktop(0)
for i in range(desktop.childCount):
    app = desktop.getChildAtIndex(i)
    if app is not None and count < MAX_NODES:
        sub = element(app, 1)
        if sub is not None:
            root.append(sub)
sys.stdout.write(ET.tostring(root, encoding="unicode"))
"""


async def read_tree(sb: TimedSandbox, env: dict[str, str], timeout: float = 30.0) -> str:
    """The desktop's accessibility tree as XML ("" when the registry cannot be read).

    Raises OutputTooLarge when it is larger than `MAX_TREE_BYTES`."""
    r = await run_python(
        sb, TREE_SCRIPT, what="the accessibility tree", env=env, timeout=timeout, max_output=MAX_TREE_BYTES
    )
    return r.stdout if r.exit_code == 0 and r.stdout.startswith("<desktop-frame") else ""


def linearize(tree_xml: str, max_lines: int = 400) -> str:
    """A tab-separated table of the tree's named or texted nodes, one per line, as OSWorld's
    agents show it to text-only models: tag, name, text, position (top-left x, y), size (w, h)."""
    lines = ["tag\tname\ttext\tposition (top-left x&y)\tsize (w&h)"]
    if not tree_xml:
        return lines[0]
    try:
        root = ET.fromstring(tree_xml)
    except ET.ParseError:
        return lines[0]
    for node in root.iter():
        name, text = node.get("name", ""), (node.text or "").strip()
        size = node.get(f"{{{CP}}}size", "")
        if node is root or not (name or text) or size in ("", "(0, 0)"):
            continue
        text = text.replace("\n", "\\n")[:100]
        lines.append(f"{node.tag}\t{name}\t{text}\t{node.get(f'{{{CP}}}screencoord', '')}\t{size}")
        if len(lines) > max_lines:
            lines.append("...")
            break
    return "\n".join(lines)


def terminal_output(tree_xml: str) -> str | None:
    """OSWorld's `vm_terminal_output`: the text of the focused terminal in the active window,
    right-stripped; None unless exactly one terminal matches (OSWorld asks for GNOME
    Terminal's; any app's terminal object counts here)."""
    try:
        root = ET.fromstring(tree_xml) if tree_xml else None
    except ET.ParseError:
        return None
    if root is None:
        return None
    found = [
        t
        for frame in root.iter("frame")
        if frame.get(f"{{{ST}}}active") == "true"
        for t in frame.iter("terminal")
        if t.get(f"{{{ST}}}focused") == "true"
    ]
    return (found[0].text or "").rstrip() if len(found) == 1 else None
