"""The web env's pure parts: the action language, task validation, the checks, reading a
snapshot the way the scripted policy does. No browser needed."""

from __future__ import annotations

import json

import pytest

from arborl.envs.web.actions import ActionError, parse_action, resolve_ids
from arborl.envs.web.evaluators import matches, resolve_path, run_checks
from arborl.tasks import get_suite
from arborl.tasks.web import WebTask, find_element, load_web_task, load_web_tasks, step_to_action

SNAPSHOT = """- generic [active] [ref=f2e1]:
  - navigation "Main" [ref=f2e3]:
    - generic [ref=f2e5]: Categories
    - link "Cart (0)" [ref=f2e6] [cursor=pointer]:
      - /url: /cart
  - 'link "Order #1000" [ref=f2e18] [cursor=pointer]':
  - textbox "Search" [ref=f2e11]: headphones
  - button "Search" [ref=f2e12]
  - heading "Results for \\"x\\"" [level=1] [ref=f2e13]
  - link "Edit" [ref=f2e20]
  - link "Edit" [ref=f2e21]
"""


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("click(e12)", ("click", {"id": "e12"})),
        ('I will search now.\nfill(e7, "a, b) c")', ("fill", {"id": "e7", "text": "a, b) c"})),
        ('select(f3e9, option="Audio")', ("select", {"id": "f3e9", "option": "Audio"})),
        ("click([e5])", ("click", {"id": "e5"})),
        ("click(12)", ("click", {"id": "12"})),
        ('press("Enter")', ("press", {"key": "Enter"})),
        ('press(e3, "Enter")', ("press", {"id": "e3", "key": "Enter"})),
        ("scroll(DOWN)", ("scroll", {"direction": "down"})),
        ("go_back()", ("go_back", {})),
        ("answer()", ("answer", {"text": ""})),
        ("answer(The price is $529)", ("answer", {"text": "The price is $529"})),
        ("goto(shop.test/cart)", ("goto", {"url": "shop.test/cart"})),
        ("<think>click(e1)</think> first hover(e2) then click(e9)", ("click", {"id": "e9"})),
    ],
)
def test_actions_parse(reply, expected):
    action = parse_action(reply)
    assert (action.name, action.args) == expected


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("", "no action found"),
        ("I am not sure what to do.", "no action found"),
        ("click(", "could not read"),
        ("click(foo)", "not an element id"),
        ("click(e1, e2)", "takes (id)"),
        ("fill(e1)", "missing text"),
        ('click(__import__("os").system("id"))', "ids, numbers or quoted strings"),
        ("scroll(sideways)", "must be one of"),
        ('answer("a", "b")', "takes (text)"),
        ("select(e1, option=1, option=2)", "given twice"),
        ("click(e1" + "(" * 5000, "could not read"),
    ],
)
def test_bad_actions_are_readable_errors(reply, message):
    with pytest.raises(ActionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_action(reply)


def test_parsing_a_huge_reply_is_fast_and_safe():
    junk = "click(" * 20_000 + '"' * 10_000
    with pytest.raises(ActionError):
        parse_action(junk)


def test_bare_numbers_resolve_to_the_ids_the_page_shows():
    assert resolve_ids(parse_action("click(12)"), SNAPSHOT).args["id"] == "f2e12"
    assert resolve_ids(parse_action("click(99)"), SNAPSHOT).args["id"] == "e99"  # not on the page
    assert resolve_ids(parse_action("click(f2e6)"), SNAPSHOT).args["id"] == "f2e6"


def test_the_scripted_policy_reads_the_snapshot():
    assert find_element(SNAPSHOT, {"role": "generic", "name": "Categories"}) == "f2e5"
    assert find_element(SNAPSHOT, {"role": "link", "name": "order #1000"}) == "f2e18"
    assert find_element(SNAPSHOT, {"role": "heading", "name": 'Results for "x"'}) == "f2e13"
    assert find_element(SNAPSHOT, {"role": "link", "name": "Edit", "nth": 1}) == "f2e21"
    assert find_element(SNAPSHOT, {"role": "link", "name": "Cart", "exact": False}) == "f2e6"
    assert find_element(SNAPSHOT, {"role": "button", "name": "Cart"}) is None
    task = get_suite("web-mini").task("shop-buy-mouse")
    assert step_to_action(task.solution[0], SNAPSHOT) == 'fill(f2e11, "wireless mouse")'
    assert step_to_action(task.solution[2], SNAPSHOT).startswith('answer("gold policy: no link')


def test_state_paths_and_subset_matching():
    state = {
        "users": [{"username": "bob", "role": "editor", "tags": ["a", "b"]}],
        "orders": [{"id": 1}, {"id": 2}],
    }
    assert resolve_path(state, "users[username=bob].role") == "editor"
    assert resolve_path(state, "orders.-1.id") == 2
    assert resolve_path(state, "orders.5") is not resolve_path(state, "orders.0")  # missing, no error
    assert matches({"role": "EDITOR"}, state["users"][0])
    assert matches({"tags": ["b"]}, state["users"][0]) and not matches({"tags": ["c"]}, state["users"][0])
    assert not matches({"role": "admin"}, state["users"][0]) and not matches({"nope": 1}, state["users"][0])
    assert matches(2, 2.0) and not matches(True, 1)


def _task(**evaluator):
    return WebTask(id="t", intent="x", sites=("shop",), start_url="http://shop.test/", evaluator=(evaluator,))


def test_checks_pass_and_fail_on_what_the_episode_left():
    state = {"shop": {"orders": [{"id": 1000, "items": [{"sku": "AC-100", "qty": 2}]}], "cart": []}}

    def run(check, url="http://shop.test/order/1001", text="Thank you", answer=None):
        (result,) = run_checks(_task(**check).evaluator, url=url, page_text=text, answer=answer, states=state)
        return result["passed"]

    assert run({"type": "url", "value": "http://shop.test/order/1001/"})
    assert not run({"type": "url", "value": "http://shop.test/order/1002"})
    assert run({"type": "url", "match": "regex", "value": r"/order/\d+$"})
    assert run({"type": "page", "contains": "thank YOU"}) and not run(
        {"type": "page", "not_contains": "thank"}
    )
    assert run({"type": "answer", "match": "number", "value": 529}, answer="It costs $529.00")
    assert not run({"type": "answer", "match": "number", "value": 529}, answer="")
    assert not run({"type": "answer", "value": "Shipped"}, answer=None)
    assert run({"type": "answer", "value": "Shipped"}, answer=" shipped.")
    ordered = {"items": [{"sku": "AC-100", "qty": 2}]}
    assert run({"type": "state", "site": "shop", "path": "orders", "contains": ordered})
    assert not run({"type": "state", "site": "shop", "path": "orders", "contains": {"items": [{"qty": 3}]}})
    assert run({"type": "state", "site": "shop", "path": "orders", "count": 1})
    assert run({"type": "state", "site": "shop", "path": "cart", "absent": {"sku": "AC-100"}})
    state.pop("shop")  # the site's state could not be read: its checks fail
    assert not run({"type": "state", "site": "shop", "path": "orders", "count": 1})


def test_tasks_validate(tmp_path):
    with pytest.raises(ValueError, match="not on one of the task's sites"):
        WebTask(
            id="t",
            intent="x",
            sites=("shop",),
            start_url="http://evil.test/",
            evaluator=({"type": "page", "contains": "a"},),
        )
    with pytest.raises(ValueError, match="does not list"):
        _task(type="state", site="admin", path="users", count=1)
    with pytest.raises(ValueError, match="exactly one of"):
        _task(type="state", site="shop", path="orders")
    with pytest.raises(ValueError, match="needs `contains`"):
        _task(type="page")
    with pytest.raises(ValueError):
        _task(type="nonsense")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"id": "b", "intent": "x"}))
    with pytest.raises(ValueError, match=r"bad\.json"):
        load_web_task(bad)
    with pytest.raises(ValueError, match="no web task JSON"):
        load_web_tasks(tmp_path / "empty")


def test_web_mini_is_registered_with_policies():
    suite = get_suite("web-mini")
    tasks = suite.tasks()
    assert suite.env_id == "arborl/Web-v0" and len(tasks) >= 8
    assert {s for t in tasks for s in t.sites} == {"shop", "admin"}
    assert any(len(t.sites) == 2 for t in tasks)
    kinds = {c.type for t in tasks for c in t.evaluator}
    assert kinds == {"url", "page", "answer", "state"}
    assert all(t.solution for t in tasks)
    assert suite.empty_policy(tasks[0])([], {}) == 'answer("")'
