"""The locally built tiny model loads through the real from_pretrained code."""

from __future__ import annotations

import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import arborl.agents.tiny as tiny
from arborl.agents.tiny import (
    MARKUP_TOKENS,
    SPECIAL_TOKENS,
    TinyModelConfig,
    build_tiny_model,
    ensure_tiny_model,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "evaluate arithmetic",
            "parameters": {
                "type": "object",
                "properties": {"expr": {"type": "string"}},
                "required": ["expr"],
            },
        },
    }
]
CONVERSATION = [
    {"role": "user", "content": "What is 2+3?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": {"expr": "2+3"}}}],
    },
    {"role": "tool", "content": "5"},
    {"role": "assistant", "content": "The answer is 5."},
]


def render(tok, messages, **kw) -> str:
    return tok.apply_chat_template(messages, tools=TOOLS, tokenize=False, **kw)


def test_loads_by_path_and_markers_are_single_tokens(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert model.config.hidden_size // model.config.num_attention_heads == 32  # vLLM-compatible
    assert model.config.vocab_size == len(tok) == TinyModelConfig().vocab_size
    for marker in SPECIAL_TOKENS + MARKUP_TOKENS:
        assert len(tok.encode(marker, add_special_tokens=False)) == 1, marker
    assert tok.eos_token == "<|im_end|>" and model.generation_config.eos_token_id == tok.eos_token_id
    text = "def add(a, b):\n    return a + b\n"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    ids = tok(text, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1]
    assert torch.isfinite(model(**ids).logits).all()


def test_words_own_tokens_makes_a_name_the_same_tokens_wherever_it_stands(tmp_path):
    """With `words_own_tokens`, what the model copies (a name from the question into a JSON
    argument, a value from a tool result into the answer) is the same token ids in both places."""
    tok = AutoTokenizer.from_pretrained(
        build_tiny_model(tmp_path / "m", TinyModelConfig(words_own_tokens=True, corpus_bytes=1_000_000))
    )

    def pieces(text: str) -> list[str]:
        return [tok.decode([i]) for i in tok.encode(text, add_special_tokens=False)]

    for name in ("Mirri", "Veloria", "Zyxqurt"):  # known to the corpus, or not
        want = pieces(name)
        for context in (f"the capital of {name}?", f'{{"query": "{name} capital"}}', f"({name})\n{name}."):
            got = pieces(context)
            assert any(got[i : i + len(want)] == want for i in range(len(got))), (name, context, got)
    assert pieces("428") == ["4", "2", "8"]  # digits stand alone: numbers copy digit by digit
    text = 'x = {"a": "b c"}  # 12 ok\n\tdone'
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_chat_template_renders_tools_and_tool_turns(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    text = render(tok, CONVERSATION)
    tools_block = text.split("<tools>\n")[1].split("\n</tools>")[0]
    assert tools_block == "calc(expr: string) - evaluate arithmetic"  # one signature line per tool
    optional = {**TOOLS[0]["function"], "parameters": {"properties": {"k": {"type": "integer"}}}}
    assert "search(k?: integer) - evaluate arithmetic" in tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tools=[{**optional, "name": "search"}], tokenize=False
    )
    assert '<tool_call>\n{"name": "calc", "arguments": {"expr": "2+3"}}\n</tool_call><|im_end|>' in text
    assert "<|im_start|>tool\n<tool_response>\n5\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\nThe answer is 5.<|im_end|>\n")


def test_chat_template_is_append_only(tiny_model):
    """Each assistant turn = the prefix's generation prompt + what the model emits + EOS + "\\n"."""
    tok = AutoTokenizer.from_pretrained(tiny_model)
    for k, msg in enumerate(CONVERSATION):
        if msg["role"] != "assistant" or msg.get("tool_calls"):
            continue
        prefix = render(tok, CONVERSATION[:k], add_generation_prompt=True)
        assert render(tok, CONVERSATION[: k + 1]) == prefix + msg["content"] + tok.eos_token + "\n"
    for k in range(1, len(CONVERSATION)):
        assert render(tok, CONVERSATION[: k + 1]).startswith(render(tok, CONVERSATION[:k]))


def test_build_is_cached_by_config(tiny_model, tmp_path):
    again = ensure_tiny_model()
    assert (
        again == tiny_model
        and (again / "model.safetensors").stat().st_mtime
        == (tiny_model / "model.safetensors").stat().st_mtime
    )
    small = TinyModelConfig(vocab_size=600, corpus_bytes=200_000)
    assert small.digest() != TinyModelConfig().digest()
    path = ensure_tiny_model(tmp_path / "m", small)
    assert len(AutoTokenizer.from_pretrained(path)) == 600


def domain_v1():
    return ["What is the capital of Veloria?"]


def domain_v2():
    return ["What is the capital of Dastan?"]


def test_the_cache_key_follows_the_domain_text_not_just_its_name(monkeypatch):
    """A suite whose language changed must not reuse a tokenizer trained on the old text."""
    here = f"{__name__}:domain_v1"
    before = TinyModelConfig(domain_text=(here,)).digest()
    assert before == TinyModelConfig(domain_text=(here,)).digest()
    tiny._domain_text_sha.cache_clear()
    monkeypatch.setattr(sys.modules[__name__], "domain_v1", domain_v2)
    assert TinyModelConfig(domain_text=(here,)).digest() != before
    tiny._domain_text_sha.cache_clear()
