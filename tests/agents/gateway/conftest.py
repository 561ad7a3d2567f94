"""The gateway served on loopback in front of the tiny model's transformers engine."""

from __future__ import annotations

import pytest
from gateway_serving import CHAT_TEMPLATE, REWRITING_TEMPLATE
from transformers import AutoTokenizer


@pytest.fixture(scope="module")
def rewriting_tok(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    assert REWRITING_TEMPLATE != CHAT_TEMPLATE and "<think>" in REWRITING_TEMPLATE
    tok.chat_template = REWRITING_TEMPLATE
    return tok
