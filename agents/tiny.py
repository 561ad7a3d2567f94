"""A tiny chat model built on this machine: a locally trained tokenizer and a Qwen2 config.

There is no model hub here, so tests, the demo and the default training recipe use a model
that is built from scratch, saved to disk, and loaded back through the real
`from_pretrained(path)` code. Users with a hub point the same code at a real model path.

- Tokenizer: byte-level BPE (Hugging Face `tokenizers`) trained on Python's own standard
  library sources plus synthetic chat and tool-call text, wrapped as a
  `PreTrainedTokenizerFast` with a ChatML chat template that renders `tool` messages and
  calls in the Hermes/Qwen2.5 `<tool_call>` style. Control markers are single tokens.
  The template lists tools as one signature line each (``calculator(expression: string) -
  description``) rather than Qwen's JSON schemas: a 2k-vocabulary model reads ~4x fewer
  tokens per episode, which is most of what training on CPU costs.
- Model: `Qwen2ForCausalLM` from a small config. Head dim 32, because vLLM accepts only
  32, 64, 80, ...

Builds are cached by a hash of the config: `ensure_tiny_model()` returns the existing
directory when it is already there.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import random
import shutil
import sysconfig
from collections.abc import Iterator, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

BUILD_VERSION = 1
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added (not special) so they survive decoding with skip_special_tokens, like Qwen's.
MARKUP_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]

CHAT_TEMPLATE = """\
{%- if tools %}<|im_start|>system
{{ messages[0].content if messages[0].role == 'system' else 'You are a helpful assistant.' }}

# Tools
<tools>
{%- for tool in tools %}{% set f = tool.function if tool.function is defined else tool %}
{%- set params = f.parameters if f.parameters is defined else {} %}
{%- set required = params.required if params.required is defined else [] %}
{{ '\n' }}{{ f.name }}(
{%- for name, spec in (params.properties if params.properties is defined else {}).items() %}
{{- name }}{% if name not in required %}?{% endif %}: {{ spec.type if spec.type is defined else 'any' }}
{%- if not loop.last %}, {% endif %}{% endfor %}) - {{ f.description if f.description is defined else '' }}
{%- endfor %}{{ '\n' }}</tools>
Call one with <tool_call>{"name": NAME, "arguments": {...}}</tool_call>.<|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'system' and loop.first %}
{%- elif m.role == 'tool' %}<|im_start|>tool
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% elif m.role == 'assistant' %}<|im_start|>assistant
{{ m.content or '' }}
{%- for tc in m.tool_calls or [] %}<tool_call>
{{ {'name': tc.function.name, 'arguments': tc.function.arguments} | tojson }}
</tool_call>
{%- endfor %}<|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


class TinyModelConfig(BaseModel):
    """Size of the tiny model and its tokenizer (change any field to get another build)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vocab_size: int = Field(2048, description="BPE vocabulary incl. special tokens")
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    max_position_embeddings: int = 4096
    corpus_bytes: int = Field(4_000_000, description="how much text the tokenizer trains on")
    domain_text: tuple[str, ...] = Field(
        ("arborl.tasks.toy.tool_mini:tokenizer_text",),
        description="'module:function' giving strings mixed into the tokenizer's corpus: the "
        "language of the tasks the model will see (the built-in tool-mini suite by default)",
    )
    words_own_tokens: bool = Field(
        False,
        description="pre-tokenize so a word never absorbs the space or quote before it and digits "
        "stand alone: a name is the same tokens in a question, a JSON argument and a tool result. "
        "Off by default: on tool-mini it learned slower (docs/results/warm-starts.md)",
    )
    seed: int = 0

    def digest(self) -> str:
        """The cache key: the config, the build and the domain text itself (a suite whose
        language changes gets a tokenizer that has read the new text, not a stale cached one)."""
        payload = self.model_dump() | {
            "build": BUILD_VERSION,
            "template": CHAT_TEMPLATE,
            "domain_text_sha": _domain_text_sha(self.domain_text),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def default_cache_dir() -> Path:
    return Path(os.environ.get("ARBORL_CACHE", Path.home() / ".cache" / "arborl")) / "models"


@functools.lru_cache(maxsize=8)
def _domain_text_sha(specs: tuple[str, ...]) -> str:
    from arborl.tasks.suites import resolve

    h = hashlib.sha256()
    for spec in specs:
        for line in resolve(spec)():
            h.update(line.encode() + b"\n")
    return h.hexdigest()


def _corpus(limit: int, seed: int, domain_text: Sequence[str] = ()) -> Iterator[str]:
    """Python's standard library sources, the domain text (e.g. tool-mini's questions and
    corpus), then synthetic chat and tool-call lines."""
    from arborl.tasks.suites import resolve

    rng = random.Random(seed)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("json/*.py"))
    seen = 0
    for path in files:
        text = path.read_text(errors="ignore")
        yield text
        seen += len(text)
        if seen >= limit * 0.85:
            break
    for spec in domain_text:
        for line in resolve(spec)():
            yield line
            seen += len(line)
    words = [
        "the",
        "file",
        "test",
        "error",
        "value",
        "answer",
        "search",
        "run",
        "python",
        "result",
        "sum",
        "list",
        "add",
        "fix",
        "bug",
        "def",
        "return",
        "import",
        "print",
        "pass",
    ]
    while seen < limit:
        name = rng.choice(["python", "search", "calculator", "bash", "edit_file", "submit"])
        args = {rng.choice(words): rng.choice([rng.randint(0, 999), " ".join(rng.sample(words, 3))])}
        line = (
            f"<|im_start|>user\n{' '.join(rng.sample(words, 6))}?<|im_end|>\n<|im_start|>assistant\n"
            f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call><|im_end|>\n'
            f"<|im_start|>tool\n<tool_response>\n{rng.randint(0, 10**6)}\n</tool_response><|im_end|>\n"
        )
        yield line
        seen += len(line)


def build_tiny_model(out_dir: Path, config: TinyModelConfig | None = None) -> Path:
    """Train the tokenizer, initialise the model, and save both to `out_dir`."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    cfg = config or TinyModelConfig()
    tok = Tokenizer(models.BPE())
    if cfg.words_own_tokens:
        # GPT-2's split glues a word to the space before it: " Mirri" in a question and "Mirri"
        # after a JSON quote become different tokens, so a tiny model must learn to spell a
        # name anew to copy it into a call or an answer. Here a word is one piece wherever
        # it stands (the space is its own piece), and digits are single.
        split = pre_tokenizers.Split(Regex(r" ?[^\s\p{L}\p{N}]+|\p{L}+|\p{N}|\s+"), behavior="isolated")
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
        )
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size - len(MARKUP_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(cfg.corpus_bytes, cfg.seed, cfg.domain_text), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        model_max_length=cfg.max_position_embeddings,
    )
    tokenizer.add_tokens(MARKUP_TOKENS)
    tokenizer.chat_template = CHAT_TEMPLATE

    torch.manual_seed(cfg.seed)
    model_cfg = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    if model_cfg.hidden_size // model_cfg.num_attention_heads not in (32, 64, 80, 96, 112, 128, 256):
        raise ValueError(
            "head dim (hidden_size / num_attention_heads) must be one vLLM supports, e.g. 32 or 64"
        )
    model = Qwen2ForCausalLM(model_cfg)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id

    tmp = out_dir.with_name(f"{out_dir.name}.partial-{os.getpid()}")  # one per builder
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer.save_pretrained(tmp)
    model.save_pretrained(tmp)
    (tmp / "arborl_tiny.json").write_text(cfg.model_dump_json(indent=2))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)  # a crash mid-build never leaves a half model where a whole one is expected
    return out_dir


def ensure_tiny_model(path: Path | None = None, config: TinyModelConfig | None = None) -> Path:
    """The tiny model's directory, built on first use (cached by config hash)."""
    cfg = config or TinyModelConfig()
    out = path or default_cache_dir() / f"tiny-qwen2-{cfg.digest()}"
    if not (out / "config.json").exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        # processes that start together (test workers, a benchmark's seeds) build it once: the
        # first builds, the others wait and reuse it; none replaces a model another is loading
        with open(out.parent / f".{out.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (out / "config.json").exists():
                build_tiny_model(out, cfg)
    return out
