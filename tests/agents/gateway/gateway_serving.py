"""The gateway served on loopback for a test (a module of its own, not conftest: several
conftest.py files exist, and `from conftest import` gets whichever pytest loaded first)."""

from __future__ import annotations

import contextlib

from arborl.agents.gateway import Gateway, GatewayConfig
from arborl.agents.gateway.serve import serving
from arborl.agents.tiny import CHAT_TEMPLATE

ADMIN = "admin-secret"

# Qwen3's rule for reasoning, on the tiny model's template: the generation prompt opens a
# <think> block; assistant turns after the last user message are rendered as the model saw
# them (<think> + its text), earlier ones keep only what follows </think> (nothing when the
# thinking never closed). A new user message therefore rewrites the history.
_LAST_USER = (
    "{%- set ns = namespace(last_user=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}"
    "{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}"
)
_ASSISTANT = (
    "{% if loop.index0 > ns.last_user %}<think>\n{{ m.content or '' }}"
    "{%- elif '</think>' in (m.content or '') %}{{ (m.content or '').split('</think>')[-1] }}"
    "{%- endif %}"
)
REWRITING_TEMPLATE = _LAST_USER + CHAT_TEMPLATE.replace("{{ m.content or '' }}", _ASSISTANT, 1).replace(
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "{%- if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}",
)


@contextlib.contextmanager
def gateway_at(engine, tok, **config):
    """(gateway, root url) of a gateway served on a loopback port for the block."""
    gw = Gateway(engine, tok, GatewayConfig(admin_token=ADMIN, **config))
    with serving(gw) as url:
        yield gw, url
