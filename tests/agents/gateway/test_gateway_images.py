"""The gateway takes OpenAI image content parts (issue 52 §4): a harness sends screenshots as
``image_url`` data URLs to a vision-language model; each call's prompt is the processor's own
ids and pixels, the segment records them with its turns, and a learner's forward pass over the
recorded trajectory gives the engine's log-probs. A text-only model, a URL to fetch, or bytes
that are no image are refused with a 400 naming the part."""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import openai
import pytest
import torch
from agent_helpers import Recording
from gateway_serving import ADMIN, gateway_at
from PIL import Image
from transformers import Qwen2VLForConditionalGeneration

from arborl.agents.engines import HFEngineConfig, make_engine
from arborl.agents.vision import load_processor, model_inputs
from arborl.envs.images import decode_image
from arborl.tasks import get_suite
from arborl.tasks.sokoban.game import push
from arborl.tasks.sokoban.picture import render_image


def client(url, eid):
    return openai.OpenAI(base_url=f"{url}/e/{eid}/v1", api_key="EMPTY", max_retries=0)


def data_url(pixels: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def shown(pixels, text):
    return [{"type": "image_url", "image_url": {"url": data_url(pixels)}}, {"type": "text", "text": text}]


@pytest.fixture(scope="module")
def processor(tiny_vlm):
    return load_processor(tiny_vlm)


def test_image_parts_are_recorded_token_and_pixel_exact(tiny_vlm, processor):
    task = get_suite("sokoban-6x6").tasks()[0]
    board = task.board()
    first, second = render_image(board), render_image(push(board, task.solution[0]))
    engine = Recording(make_engine(HFEngineConfig(model=str(tiny_vlm))))
    with gateway_at(engine, processor) as (gw, url):
        eid = gw.open_episode(task_id="soko")
        c = client(url, eid)
        messages = [
            {"role": "system", "content": "Solve it."},
            {"role": "user", "content": shown(first, "Move?")},
        ]
        r = c.chat.completions.create(model="tiny", messages=messages, max_tokens=6, seed=1)
        messages += [r.choices[0].message.model_dump(exclude_none=True, include={"role", "content"})]
        messages += [{"role": "user", "content": shown(second, "Now?")}]
        c.chat.completions.create(model="tiny", messages=messages, max_tokens=6, seed=2)
        listed = httpx.get(
            f"{url}/admin/episodes/{eid}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30
        )
        (traj,) = gw.end_episode(eid, reward=1.0)
    (as_json,) = listed.json()["trajectories"]  # the admin route's JSON carries the pixels too
    assert np.array_equal(
        np.asarray(as_json["prompt_images"]["pixel_values"], dtype=np.float32),
        traj.prompt_images.pixel_values,
    )
    assert (
        as_json["turns"][0]["observation_images"]["image_grid_thw"]
        == traj.turns[0].observation_images.image_grid_thw.tolist()
    )
    # and the pictures, as PNG data URLs: the ones the request sent
    (url0,) = as_json["prompt_images"]["pictures"]
    assert url0.startswith("data:image/png;base64,")
    sent = decode_image(base64.b64decode(url0.split(",", 1)[1]))
    assert np.array_equal(sent, traj.prompt_images.pictures[0])
    (p0, _, lp0), (p1, c1, lp1) = engine.calls
    assert traj.prompt_ids == p0 and traj.token_ids().tolist() == p1 + c1  # one append-only segment
    # the first prompt is the processor's own rendering of the first request (ids and pixels)
    reference = processor.apply_chat_template(
        [messages[0], {"role": "user", "content": [{"type": "image", "image": first}, {"type": "text", "text": "Move?"}]}],
        tokenize=True, return_dict=True, add_generation_prompt=True, return_tensors="np",
    )  # fmt: skip
    assert p0 == reference["input_ids"][0].tolist()
    assert np.array_equal(traj.prompt_images.pixel_values, reference["pixel_values"])
    later = processor.image_processor(images=[second], return_tensors="np")
    assert np.array_equal(traj.turns[0].observation_images.pixel_values, later["pixel_values"])
    assert traj.turns[1].observation_images is None
    # a learner's one forward pass over the recorded ids and pixels gives the engine's log-probs
    model = Qwen2VLForConditionalGeneration.from_pretrained(tiny_vlm).eval()
    with torch.no_grad():
        kwargs = model_inputs(model, traj.token_ids().tolist(), traj.images())
        kwargs.pop("rope_delta")
        logits = model(**kwargs).logits[0, :-1]
        # the engine never samples the vision placeholders (their distribution leaves them out)
        c = model.config
        logits[
            :, [c.image_token_id, c.video_token_id, c.vision_start_token_id, c.vision_end_token_id]
        ] = -torch.inf
        logp = logits.log_softmax(-1)
    ids = torch.as_tensor(traj.token_ids())
    learner = logp.gather(1, ids[1:].unsqueeze(1)).squeeze(1).numpy()
    mask = traj.loss_mask()[1:].astype(bool)
    assert np.allclose(learner[mask], np.array(lp0 + lp1), atol=1e-4)


def test_bad_image_parts_and_text_models_are_refused_naming_the_part(tiny_vlm, processor, engine, tok):
    pixels = np.zeros((8, 8, 3), dtype=np.uint8)
    with gateway_at(engine, tok) as (gw, url):
        c = client(url, gw.open_episode())
        with pytest.raises(openai.BadRequestError, match="reads text only"):
            c.chat.completions.create(model="t", messages=[{"role": "user", "content": shown(pixels, "hi")}])
    vlm = make_engine(HFEngineConfig(model=str(tiny_vlm)))
    with gateway_at(vlm, processor) as (gw, url):
        c = client(url, gw.open_episode())
        for url_, why in [
            ("http://example.test/a.png", "data: URL"),
            ("data:image/png;base64,%%%", "base64"),
            ("data:image/png;base64," + base64.b64encode(b"not a png").decode(), "do not decode"),
        ]:
            bad = [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": url_}}]
            with pytest.raises(openai.BadRequestError, match=rf"content\[1\].*{why}"):
                c.chat.completions.create(model="t", messages=[{"role": "user", "content": bad}])
        assert not gw.trajectories(gw.open_episode())
