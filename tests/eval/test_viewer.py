"""`arborl view`: the page of a real eval run (whose env shows screenshots) and of a training
run directory, opened in headless Chromium: the list, an episode's turns, the filters, a
screenshot that loads, agent text that stays text, serving on loopback only, bad input."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest
from gymnasium import spaces
from PIL import Image, ImageDraw
from rich.console import Console

from arborl.agents.trajectory import Trajectory, Turn
from arborl.cli.main import main as arborl
from arborl.envs import register_env
from arborl.envs.function_calling.env import ToolEnv
from arborl.eval.config import EvalConfig
from arborl.eval.runner import run_eval
from arborl.eval.viewer import NotViewable, load_dir, serve_page, write_page
from arborl.tasks import Suite, get_suite, register_suite
from arborl.tasks.toy import tool_mini as tm
from arborl.trainer.local.checkpoint import Checkpointer, RunState
from arborl.trainer.local.trajectory_store import TrajectoryStore

XSS = "<script>alert(1)</script><img src=x onerror=alert(2)>"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


class ScreenToolEnv(ToolEnv):
    """tool-mini's env, with a screenshot in every observation (as the desktop env has)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.observation_space = spaces.Dict(
            {"messages": self.observation_space, "screenshot": spaces.Box(0, 255, (120, 160, 3), np.uint8)}
        )
        self.shots = 0

    async def make_observation(self, messages):
        image = Image.new("RGB", (160, 120), (30, 60, 110 + 20 * (self.shots % 5)))
        ImageDraw.Draw(image).text((10, 50), f"screen {self.shots}", fill=(255, 255, 255))
        self.shots += 1
        return {"messages": messages, "screenshot": np.asarray(image)}


def gold_or_script(task):
    """tool-mini's gold policy, except on arith-001 whose answer is a script tag."""
    if task.id.endswith("arith-001"):
        return lambda messages, info: XSS
    return tm.gold_policy(task)


@pytest.fixture(scope="module")
def eval_dir(tmp_path_factory):
    """A real `arborl eval` run of tool-mini's first four tasks in an env with screenshots."""
    register_env("test/ScreenTool-v0", ScreenToolEnv, force=True)
    register_suite(
        Suite(
            "test-view-screens",
            "test/ScreenTool-v0",
            lambda: get_suite("tool-mini").tasks()[:4],
            gold=gold_or_script,
        ),
        force=True,
    )
    run = tmp_path_factory.mktemp("view") / "eval"
    cfg = EvalConfig(suite="test-view-screens", agent="gold", run={"dir": str(run)}, report=False)
    asyncio.run(run_eval(cfg, console=Console(quiet=True)))
    return run


def _ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model):
    """A training run directory in the trainer's format: stored groups (two policy versions),
    metrics.jsonl and a checkpoint with the tokenizer, written by the trainer's own classes."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = tmp_path_factory.mktemp("view") / "train"
    tok = AutoTokenizer.from_pretrained(tiny_model)
    chat = [{"role": "user", "content": "What is 2 + 3?"}]
    prompt = _ids(tok, tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False))
    store = TrajectoryStore(run / "trajectories")
    for index, (version, replies) in enumerate([(0, ["5", XSS]), (1, ["<answer>5</answer>", "six"])]):
        group = []
        for j, reply in enumerate(replies):
            ids = _ids(tok, reply)
            turn = Turn(
                ids,
                [-0.5] * len(ids),
                _ids(tok, "<|im_end|>\n"),
                [version] * len(ids),
                reward=float("5" in reply),
            )
            group.append(
                Trajectory(
                    prompt,
                    [turn],
                    task_id=f"arith/{index}-{j}",
                    group_id=f"group-{index}",
                    outcome_reward=turn.reward,
                    terminated=True,
                    metrics={"success": turn.reward},
                )
            )
        store.put(index, group)
    events = [{"phase": "rl", "step": s, "rollout/reward": 0.5, "rollout/success": 0.5} for s in (1, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    Checkpointer(run).save(model, tok, {}, RunState(version=2))
    return run


@pytest.fixture(scope="module")
def browser(web_chromium):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=web_chromium, headless=True, args=LAUNCH_ARGS)
        yield b
        b.close()


def open_page(browser, url):
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    page.dialogs, page.errors = [], []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.goto(url)
    return page


def rows(page):
    return page.locator("#list tbody tr")


def open_episode(page, task):
    rows(page).filter(has_text=task).first.click()
    page.wait_for_selector(f"#detail h2:has-text('{task}')")


def test_the_eval_stores_each_observation_screenshot(eval_dir):
    screens = sorted((eval_dir / "instances").glob("*/sample-0/screens/turn-*.png"))
    assert screens and {p.name for p in screens} >= {"turn-000.png", "turn-001.png"}
    with Image.open(screens[0]) as image:
        assert image.size == (160, 120)
    rewards = json.loads(next((eval_dir / "instances").glob("*arith-000/sample-0/rewards.json")).read_text())
    assert rewards[-1] == 1.0


@pytest.mark.browser
def test_an_eval_page_lists_opens_filters_and_shows_screenshots(eval_dir, browser, tmp_path):
    out = write_page(load_dir(eval_dir), tmp_path / "elsewhere" / "view.html")  # links relative to it
    page = open_page(browser, out.as_uri())
    assert rows(page).count() == 4
    assert page.locator("#count").inner_text() == "4 of 4 episodes"
    assert page.locator("#l-step").is_hidden()  # an eval has no training steps

    open_episode(page, "tool-mini/arith-000")
    turns = page.locator("#detail .turn")
    assert turns.count() == 2
    assert "calculator" in turns.first.inner_text()
    assert "reward" in turns.last.inner_text()
    img = turns.first.locator("img")
    img.scroll_into_view_if_needed()
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=img.element_handle())
    assert img.evaluate("img => img.naturalWidth") == 160

    page.select_option("#f-outcome", "failure")
    assert rows(page).count() == 1 and "arith-001" in rows(page).first.inner_text()
    page.select_option("#f-outcome", "")
    page.fill("#f-q", "arith")  # tool-mini's first four: arith-000, lookup-000, multi-000, arith-001
    assert rows(page).count() == 2
    assert page.errors == []


@pytest.mark.browser
def test_agent_text_is_shown_as_text_and_never_runs(eval_dir, run_dir, browser):
    for d, task in ((eval_dir, "tool-mini/arith-001"), (run_dir, "arith/0-1")):
        page = open_page(browser, write_page(load_dir(d)).as_uri())
        open_episode(page, task)
        replies = page.locator("#detail .msg.assistant pre").all_inner_texts()
        assert XSS in replies
        assert page.locator("#detail script").count() == 0
        page.wait_for_timeout(200)
        assert page.dialogs == [] and page.errors == []
    html = (eval_dir / "view.html").read_text()
    assert XSS not in html  # the JSON in the page escapes < and >


@pytest.mark.browser
def test_a_training_run_page_decodes_turns_and_filters_by_step(run_dir, browser):
    data = load_dir(run_dir)
    assert data.kind == "run" and len(data.episodes) == 4
    assert any("not stored" in n for n in data.notes)  # advantages: said, not invented
    page = open_page(browser, write_page(data).as_uri())
    assert rows(page).count() == 4
    page.select_option("#f-step", "v1")
    assert rows(page).count() == 2
    open_episode(page, "arith/1-0")
    detail = page.locator("#detail").inner_text()
    assert "<answer>5</answer>" in detail and "<|im_start|>user" in detail  # decoded, as the model saw it
    assert "return-to-go" in detail and page.locator("#steps summary").is_visible()
    assert page.errors == []


@pytest.fixture(scope="module")
def big_run(tmp_path_factory):
    """3000 episodes (600 groups of 5) and no checkpoint: the stored text and token counts."""
    run = tmp_path_factory.mktemp("view") / "big"
    store = TrajectoryStore(run / "trajectories")
    for g in range(600):
        turn = Turn([1, 2, 3], [0.0] * 3, [4], [g // 100] * 3, reward=float(g % 2), anchor_observation="obs")
        store.put(g, [Trajectory([5, 6], [turn], task_id=f"big/{g}", group_id=str(g)) for _ in range(5)])
    return run


@pytest.mark.browser
@pytest.mark.parametrize("inline_limit", [None, 1000])
def test_thousands_of_episodes_open_a_page_at_a_time(big_run, browser, tmp_path, inline_limit):
    """Inline, and with the details in files beside the page (a run past the inline limit)."""
    kw = {} if inline_limit is None else {"inline_limit": inline_limit}
    out = write_page(load_dir(big_run), tmp_path / "view.html", **kw)
    chunk_files = sorted((tmp_path / "view_files").glob("chunk-*.js"))
    assert len(chunk_files) == (0 if inline_limit is None else 15)  # 3000 episodes, 200 a chunk
    page = open_page(browser, out.as_uri())
    assert rows(page).count() == 100
    assert page.locator("#pageinfo").inner_text() == "page 1 of 30"
    page.click("#next")
    assert (
        "big/20" in rows(page).first.inner_text() and page.locator("#pageinfo").inner_text() == "page 2 of 30"
    )
    page.fill("#f-q", "big/500")  # an episode of a later chunk
    assert rows(page).count() == 5
    rows(page).first.click()
    page.wait_for_selector("#detail h2:has-text('big/500')")
    assert "no tokenizer" in page.locator("#detail").inner_text()
    assert page.errors == []


@pytest.mark.browser
@pytest.mark.parametrize("run", ["eval", "big"])
def test_serve_binds_loopback_and_sends_only_the_page_and_its_files(run, eval_dir, big_run, browser):
    """The eval's page and screenshots; the big run's page with its details served as files."""
    data = load_dir(eval_dir if run == "eval" else big_run)
    server = serve_page(data, port=0, inline_limit=1000)
    host, port = server.server_address[:2]
    assert host == "127.0.0.1"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://{host}:{port}/"
        for secret in (
            "results.sqlite",
            "../../etc/passwd",
            "instances",
            "trajectories/group-000000.parquet",
        ):
            with pytest.raises(urllib.error.HTTPError):
                urllib.request.urlopen(base + secret)
        page = open_page(browser, base)
        if run == "big":
            page.fill("#f-q", "big/321")
            open_episode(page, "big/321")
            assert page.errors == []
            return
        shot = sorted(f for f in data.files if f.endswith("turn-001.png"))[0]
        assert urllib.request.urlopen(base + shot).read().startswith(b"\x89PNG")
        open_episode(page, "tool-mini/lookup-000")
        img = page.locator("#detail img").first
        img.scroll_into_view_if_needed()
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=img.element_handle())
    finally:
        server.shutdown()
        server.server_close()


def test_a_directory_that_is_neither_says_what_it_looked_for(tmp_path, capsys):
    with pytest.raises(NotViewable, match=r"results\.sqlite.*trajectories/"):
        load_dir(tmp_path)
    assert arborl(["view", str(tmp_path)]) == 2
    assert "neither an evaluation run" in capsys.readouterr().out
    assert arborl(["view", str(tmp_path / "missing")]) == 2


def test_the_command_writes_the_page(eval_dir, capsys):
    assert arborl(["view", str(eval_dir)]) == 0
    assert f"wrote {eval_dir / 'view.html'} (4 episodes)" in capsys.readouterr().out
