"""The locally built tiny vision-language model loads through the real from_pretrained code,
renders image parts as Qwen2-VL's own chat template does, and reads images."""

from __future__ import annotations

import jinja2
import numpy as np
import pytest
import torch
from transformers import AutoModelForImageTextToText, Qwen2VLForConditionalGeneration

from arborl.agents.tiny_vlm import VISION_TOKENS, VLM_CHAT_TEMPLATE
from arborl.agents.vision import ImageEncoder, load_processor, model_inputs

# Qwen2-VL-7B-Instruct's chat_template.json, verbatim: the reference for how image parts render.
QWEN2_VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in "
    "messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful "
    "assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string "
    "%}{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}{% if "
    "content['type'] == 'image' or 'image' in content or 'image_url' in content %}{% set image_count.value = "
    "image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif "
    "%}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'video' or 'video' in content "
    "%}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value "
    "}}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}{{ "
    "content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt "
    "%}<|im_start|>assistant\n{% endif %}"
)


def picture(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


CONVERSATION = [
    {"role": "system", "content": "You play Sokoban."},
    {
        "role": "user",
        "content": [{"type": "image", "image": picture(64, 96)}, {"type": "text", "text": "Move?"}],
    },
    {"role": "assistant", "content": "<action>up</action>"},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Now:"},
            {"type": "image", "image": picture(40, 48, 1)},
            {"image_url": {"url": "data:..."}},
        ],
    },
]


@pytest.fixture(scope="module")
def processor(tiny_vlm):
    return load_processor(tiny_vlm)


@pytest.mark.parametrize("vision_id", [False, True])
def test_the_template_renders_image_parts_as_qwen2_vls_own(processor, vision_id):
    reference = jinja2.Environment().from_string(QWEN2_VL_TEMPLATE)
    for gen in (False, True):
        ours = processor.apply_chat_template(
            CONVERSATION, tokenize=False, add_generation_prompt=gen, add_vision_id=vision_id
        )
        theirs = reference.render(messages=CONVERSATION, add_generation_prompt=gen, add_vision_id=vision_id)
        assert ours == theirs
    assert processor.tokenizer.chat_template == processor.chat_template == VLM_CHAT_TEMPLATE


def test_loads_by_path_with_vision_tokens_single(tiny_vlm, processor):
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm)
    assert isinstance(model, Qwen2VLForConditionalGeneration)
    tok = processor.tokenizer
    for marker in VISION_TOKENS:
        assert len(tok.encode(marker, add_special_tokens=False)) == 1, marker
    assert (
        model.config.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>") == processor.image_token_id
    )
    text = model.config.get_text_config()
    assert text.vocab_size == len(tok) and text.hidden_size // text.num_attention_heads == 32
    assert tok.eos_token == "<|im_end|>" and model.generation_config.eos_token_id == tok.eos_token_id
    # a real Qwen2-VL directory's files, so AutoProcessor on a host with torchvision reads it as one
    assert (tiny_vlm / "video_preprocessor_config.json").exists()
    assert '"processor_class": "Qwen2VLProcessor"' in (tiny_vlm / "processor_config.json").read_text()


def test_a_forward_pass_and_generation_read_the_image(tiny_vlm, processor):
    model = Qwen2VLForConditionalGeneration.from_pretrained(tiny_vlm).eval()
    ip = processor.image_processor
    messages = CONVERSATION[:2]
    inputs = processor.apply_chat_template(
        messages, tokenize=True, return_dict=True, add_generation_prompt=True, return_tensors="pt"
    )
    # one placeholder per merged patch group: t*h*w / merge**2, from the processor's own grid
    (t, h, w) = inputs["image_grid_thw"][0].tolist()
    pads = int((inputs["input_ids"] == processor.image_token_id).sum())
    assert pads == t * h * w // ip.merge_size**2 and inputs["pixel_values"].shape[0] == t * h * w
    with torch.no_grad():
        logits = model(**inputs).logits[0, -1]
        other = processor.apply_chat_template(
            [messages[0], {**messages[1], "content": [{"type": "image", "image": picture(64, 96, 7)}, messages[1]["content"][1]]}],
            tokenize=True, return_dict=True, add_generation_prompt=True, return_tensors="pt",
        )  # fmt: skip
        assert torch.equal(other["input_ids"], inputs["input_ids"])  # same tokens, other pixels
        assert not torch.allclose(model(**other).logits[0, -1], logits)  # the model sees the pixels
    out = model.generate(**inputs, max_new_tokens=6, do_sample=False)
    assert out.shape[1] > inputs["input_ids"].shape[1]
    # arborl's encoder gives the processor's own ids and pixels; its positions its own logits
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids, images = ImageEncoder(processor).encode(text, messages)
    assert ids == inputs["input_ids"][0].tolist()
    assert np.array_equal(images.pixel_values, inputs["pixel_values"].numpy())
    assert np.array_equal(images.image_grid_thw, inputs["image_grid_thw"].numpy())
    kwargs = model_inputs(model, ids, images)
    kwargs.pop("rope_delta")
    with torch.no_grad():
        assert torch.equal(model(**kwargs).logits[0, -1], logits)


def test_max_pixels_bounds_an_images_tokens(processor):
    big = processor.image_processor(images=[picture(1024, 768)], return_tensors="np")
    (_t, h, w) = big["image_grid_thw"][0]
    patch = processor.image_processor.patch_size
    assert h * w * patch * patch <= 128 * 128  # TinyVLMConfig.max_pixels
