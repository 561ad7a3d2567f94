"""OSWorld's `check_accessibility_tree` (its metrics/general.py) on the XML the
`accessibility_tree` getter reads (`a11y.read_tree`).

    rules = [{"selectors": ['tool-bar[attr|id=MsgHeadersToolbar] label[name=To]']},
             {"xpath": '//push-button[@st:focused="true"]', "text": "OK", "exact": False}]
    check_accessibility_tree(tree_xml, rules)   # the product of the rules' scores

Each rule selects elements by CSS `selectors` (joined with ", ") or by `xpath` (which wins
when both are given); no element scores 0. With `text`, the rule scores the best match of an
element's text: equality (`exact`, the default) or `indel_ratio / 100`. The prefixes `st`,
`attr` and `cp` are the tree's states, object attributes and component (position, size)
namespaces, as in OSWorld's selectors; arborl's tree has no `doc`, `txt`, `val` or `act`
attributes, so selectors on those match nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .a11y import ATTR, CP, ST
from .office_metrics import indel_ratio

#: The namespace prefixes OSWorld's rules use, mapped to the URIs of arborl's tree.
NAMESPACES = {
    "st": ST,
    "attr": ATTR,
    "cp": CP,
    "doc": "uri:deskat:document.at-spi.gnome.org",
    "docattr": "uri:deskat:attributes.document.at-spi.gnome.org",
    "txt": "uri:deskat:text.at-spi.gnome.org",
    "val": "uri:deskat:value.at-spi.gnome.org",
    "act": "uri:deskat:action.at-spi.gnome.org",
}


def check_accessibility_tree(result: Any, rules: Sequence[Mapping[str, Any]]) -> float:
    """The product over `rules` of each rule's score (see the module docstring)."""
    from lxml import etree
    from lxml.cssselect import CSSSelector

    if not result:
        return 0.0  # no tree could be read (no AT-SPI registry): nothing can be found
    tree = etree.fromstring(str(result).encode())
    total = 1.0
    for r in rules:
        if "xpath" in r:
            elements = tree.xpath(r["xpath"], namespaces=NAMESPACES)
        elif "selectors" in r:
            elements = CSSSelector(", ".join(r["selectors"]), namespaces=NAMESPACES)(tree)
        else:
            raise ValueError("a check_accessibility_tree rule needs `xpath` or `selectors`")
        if not elements:
            return 0.0
        if "text" in r:
            want, exact = str(r["text"]), bool(r.get("exact", True))
            texts = [e.text or None for e in elements]
            if exact:
                score = float(any(t == want for t in texts))
            else:
                score = max(indel_ratio(want, t) / 100.0 if t is not None else 0.0 for t in texts)
            total *= score
    return total


A11Y_METRICS: dict[str, Callable[..., float]] = {"check_accessibility_tree": check_accessibility_tree}
