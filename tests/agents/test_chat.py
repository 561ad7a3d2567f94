"""Append-only conversations on the tiny model's real tokenizer and chat template."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from arborl.agents.chat import ChatTemplateError, TokenizedChat, check_append_only

TOOLS = [
    {"type": "function", "function": {"name": "calc", "parameters": {"type": "object", "properties": {}}}}
]
# A ChatML variant that, like some reasoning-model templates, drops <think> blocks from
# earlier assistant turns: rendering a longer conversation rewrites the shorter one.
DROPS_THINKING = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and not loop.last %}{{ m.content.split('</think>')[-1] }}"
    "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def encode(tok, text):
    return tok.encode(text, add_special_tokens=False)


def test_appending_equals_rendering_the_whole_conversation(tok):
    opening = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+3?"}]
    chat = TokenizedChat.start(tok, opening, tools=TOOLS, strict=True)
    first = [*encode(tok, '<tool_call>\n{"name": "calc", "arguments": {}}\n</tool_call>'), tok.eos_token_id]
    chat.append_response(first)
    added = chat.append_messages([{"role": "tool", "content": "5"}])
    assert (
        tok.decode(added) == "\n<|im_start|>tool\n<tool_response>\n5\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    chat.append_response([*encode(tok, "It is 5."), tok.eos_token_id])
    chat.append_messages([{"role": "user", "content": "Thanks!"}])
    messages = [
        *opening,
        {"role": "assistant", "content": '<tool_call>\n{"name": "calc", "arguments": {}}\n</tool_call>'},
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": "It is 5."},
        {"role": "user", "content": "Thanks!"},
    ]
    whole = tok.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert chat.ids == encode(tok, whole)  # canonical responses: identical to one full rendering


def test_sampled_ids_are_kept_verbatim_never_retokenized(tok):
    chat = TokenizedChat.start(tok, [{"role": "user", "content": "Say hello."}])
    prompt_len = len(chat.ids)
    # "hello" spelled byte by byte: not how the tokenizer would encode it, but what was sampled.
    odd = [tok.convert_tokens_to_ids(ch) for ch in "hello"] + [tok.eos_token_id]
    assert odd[:5] != encode(tok, "hello")
    chat.append_response(odd)
    chat.append_messages([{"role": "user", "content": "Again."}])
    assert chat.ids[prompt_len : prompt_len + len(odd)] == odd


def test_a_length_cut_response_gets_the_whole_delimiter(tok):
    chat = TokenizedChat.start(tok, [{"role": "user", "content": "Count."}])
    chat.append_response(encode(tok, "1 2 3"))  # no EOS: cut by max tokens
    added = chat.append_messages([{"role": "user", "content": "Go on."}])
    assert added[0] == tok.eos_token_id
    assert tok.decode(added).startswith("<|im_end|>\n<|im_start|>user\nGo on.")


def test_order_is_enforced(tok):
    chat = TokenizedChat.start(tok, [{"role": "user", "content": "x"}])
    with pytest.raises(RuntimeError):
        chat.append_messages([{"role": "user", "content": "y"}])
    chat.append_response([tok.eos_token_id])
    with pytest.raises(RuntimeError):
        chat.append_response([tok.eos_token_id])


def test_templates_that_rewrite_history_are_reported(tok, tiny_model):
    assert check_append_only(tok) == [] and check_append_only(tok, TOOLS) == []
    bad = AutoTokenizer.from_pretrained(tiny_model)
    bad.chat_template = DROPS_THINKING
    problems = check_append_only(bad)
    assert problems and "rewrites" in problems[0]
    with pytest.raises(ChatTemplateError, match="rewrites"):
        TokenizedChat.start(bad, [{"role": "user", "content": "x"}], strict=True)
