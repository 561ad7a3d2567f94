"""An eval of a policy shown pictures keeps the pictures it saw and the report shows them
(issue 52 §6): a real `arborl eval` on picture-Sokoban, whose observations are chat parts
(`{"type": "image", "image": uint8 [H, W, 3]}`) with no `screenshot` key, checked against the
env's own observations and the suite's own picture reader."""

from __future__ import annotations

import asyncio
import json
import re

import gymnasium
import numpy as np
import pytest
from PIL import Image
from rich.console import Console

import arborl.envs  # noqa: F401 - registers the envs
from arborl.eval.config import EvalConfig
from arborl.eval.runner import run_eval
from arborl.eval.viewer import load_dir
from arborl.tasks import get_suite
from arborl.tasks.sokoban.picture import read_image

SUITE = "sokoban-6x6-image"


@pytest.fixture(scope="module")
def picture_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("pictures") / "run"
    cfg = EvalConfig(suite=SUITE, agent="gold", limit=2, run={"dir": str(run)})
    asyncio.run(run_eval(cfg, console=Console(quiet=True)))
    return run


def image_parts(messages):
    """The image parts of `messages`, in order."""
    return [
        p for m in messages if isinstance(m["content"], list) for p in m["content"] if p["type"] == "image"
    ]


def samples(run):
    return sorted((run / "instances").glob("*/sample-0"))


def test_the_pictures_the_model_saw_are_stored_and_the_transcript_names_them(picture_run):
    suite = get_suite(SUITE)
    tasks = {t.id: t for t in suite.tasks()}
    for out in samples(picture_run):
        text = (out / "transcript.json").read_text()
        assert "[[[" not in text  # no printed numpy arrays (what the transcript held before)
        messages = json.loads(text)
        replies = [m for m in messages if m["role"] == "assistant"]
        parts = image_parts(messages)
        # one picture for the prompt and one per observation after a reply
        assert [p["file"] for p in parts] == [f"screens/turn-{k:03d}.png" for k in range(len(replies) + 1)]
        assert {p.name for p in (out / "screens").iterdir()} == {p["file"].split("/")[1] for p in parts}

        # the stored picture is the env's observation, pixel for pixel
        env = gymnasium.make("arborl/Sokoban-v0", obs_type="image")
        task = tasks[out.parent.name]
        obs, _ = env.reset(options={"task": task})
        messages = obs["messages"] if isinstance(obs, dict) else obs
        shown = [p["image"] for p in image_parts(messages)]
        env.close()
        stored = np.asarray(Image.open(out / "screens" / "turn-000.png").convert("RGB"))
        assert stored.shape == (parts[0]["height"], parts[0]["width"], 3)
        np.testing.assert_array_equal(stored, shown[-1])

        # read back with the suite's picture reader, the last picture shows every box on a target
        last = np.asarray(Image.open(out / parts[-1]["file"]).convert("RGB"))
        rows = read_image(last)
        assert rows is not None and not any("X" in r or "$" in r for r in rows), rows


def test_the_report_shows_each_episode_as_a_strip_of_pictures_and_replies(picture_run):
    page = (picture_run / "report.html").read_text()
    assert "What the model saw and did" in page
    rows = page.split("<div class=strip-row>")[1:]
    assert len(rows) == len(samples(picture_run)) == 2
    for row, out in zip(rows, samples(picture_run), strict=True):
        messages = json.loads((out / "transcript.json").read_text())
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        assert row.count("<figure>") == len(replies) + 1
        assert row.count("src='data:image/png;base64,") == len(replies) + 1
        moves = re.findall(r"&lt;action&gt;(\w+)&lt;/action&gt;", row)
        assert moves == [re.search(r"<action>(\w+)</action>", r).group(1) for r in replies]
        assert "end, solved" in row


def test_the_viewer_shows_a_picture_turn_and_names_the_picture_in_the_text(picture_run):
    page = load_dir(picture_run)
    (episode, *_) = page.episodes
    assert episode.prompt_screenshot.endswith("screens/turn-000.png")
    assert any("[picture screens/turn-000.png 96×96]" in m.text for m in episode.prompt)
    assert all(t.screenshot and t.screenshot.endswith(f"turn-{t.index:03d}.png") for t in episode.turns)


def test_a_text_eval_has_no_pictures_and_no_strips(tmp_path):
    run = tmp_path / "run"
    cfg = EvalConfig(suite="tool-mini", agent="gold", limit=1, run={"dir": str(run)})
    asyncio.run(run_eval(cfg, console=Console(quiet=True)))
    (out,) = samples(run)
    assert not (out / "screens").exists()
    assert "What the model saw" not in (run / "report.html").read_text()


def test_a_picture_that_does_not_read_leaves_the_rest_of_the_report(picture_run, tmp_path):
    import shutil

    from arborl.eval.report import write_report

    run = tmp_path / "copy"
    shutil.copytree(picture_run, run)
    (bad,) = sorted(run.glob("instances/*/sample-0/screens/turn-001.png"))[:1]
    bad.write_bytes(b"not a png")
    _, page, _ = write_report([run])
    text = page.read_text()
    assert "turn-001.png does not read" in text and text.count("<figure>") == sum(
        1 + len([m for m in json.loads(p.read_text()) if m["role"] == "assistant"])
        for p in run.glob("instances/*/sample-0/transcript.json")
    )


def test_past_the_cap_episodes_are_counted_not_drawn(picture_run, monkeypatch):
    from arborl.eval import report_strips
    from arborl.eval.report import _Run

    monkeypatch.setattr(report_strips, "MAX_EPISODES", 1)
    (section,) = report_strips.strip_sections([_Run(picture_run)])
    assert section.count("<div class=strip-row>") == 1 and "1 of 2 episodes with pictures shown" in section


def test_transcript_pictures_are_named_by_turn_and_other_parts_kept():
    from arborl.eval.screens import transcript_images

    pixels = np.zeros((4, 5, 3), np.uint8)
    url = {"type": "image", "image_url": {"url": "data:image/png;base64,AAAA"}}  # a gateway's part
    messages = [
        {
            "role": "user",
            "content": [url, {"type": "image", "image": pixels}, {"type": "text", "text": "go"}],
        },
        {"role": "assistant", "content": "left"},
        {"role": "user", "content": [{"type": "image", "image": pixels}, {"type": "image", "image": pixels}]},
    ]
    out, files = transcript_images(messages)
    assert out[0]["content"][0] == url and out[0]["content"][2] == {"type": "text", "text": "go"}
    assert [
        p["file"] for m in out if isinstance(m["content"], list) for p in m["content"] if "file" in p
    ] == [
        "screens/turn-000.png",
        "screens/turn-001.png",
        "screens/turn-001-1.png",
    ]
    assert sorted(files) == ["screens/turn-000.png", "screens/turn-001-1.png", "screens/turn-001.png"]
    assert out[0]["content"][1]["width"] == 5 and out[0]["content"][1]["height"] == 4


def test_env_kwargs_show_a_vlm_the_picture_of_a_text_suite(tmp_path, tiny_vlm):
    """`arborl eval suite=sokoban-6x6 agent=model model.path=<VLM> +env_kwargs.obs_type=image`:
    the override, composed as the CLI composes it, reaches the suite's env, whose episodes
    then show the model the room's picture (stored as the pictures it saw); a text-only
    suite's env."""
    from arborl.cli.eval_cmds import compose_eval

    run = tmp_path / "run"
    _, cfg = compose_eval(
        [
            "suite=sokoban-6x6",
            "agent=model",
            f"model.path={tiny_vlm}",
            "model.max_new_tokens=6",
            "+env_kwargs.obs_type=image",
            "limit=1",
            "max_turns=2",
            f"run.dir={run}",
        ]
    )
    assert cfg.env_kwargs == {"obs_type": "image"}
    asyncio.run(run_eval(cfg, console=Console(quiet=True)))
    (out,) = samples(run)
    messages = json.loads((out / "transcript.json").read_text())
    files = [p["file"] for p in image_parts(messages)]
    assert files and files[0] == "screens/turn-000.png" and (out / files[0]).is_file()
    picture = np.asarray(Image.open(out / files[0]).convert("RGB"))
    # the suite's own reader finds the task's room in it
    assert read_image(picture) == get_suite("sokoban-6x6").tasks()[0].rows
