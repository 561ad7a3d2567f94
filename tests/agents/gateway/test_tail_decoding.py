"""The gateway decodes a segment's tail incrementally (`prompts.extend_decoded`): the same text
as decoding the whole tail, for the tiny model's byte-level BPE (special tokens and characters
cut between ids included) and for a SentencePiece-style decoder (Metaspace: a leading space is
the first id's); and in an episode the gateway decodes only the new ids and a seam, not the
context, each call."""

from __future__ import annotations

import asyncio
import random

import pytest
from scripted_engine import Scripted
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from arborl.agents.gateway import Gateway
from arborl.agents.gateway.prompts import SEAM, decode, extend_decoded
from arborl.agents.gateway.schema import ChatRequest

TEXTS = [
    "The quick brown fox jumps over the lazy dog. ",
    "naïve café — déjà vu ✓ 漢字かな交じり文 🙂🚀 ",
    "def f(x):\n    return x ** 2  # squares\n",
    '{"name": "door", "arguments": {"colour": "red"}}',
]


def metaspace_tokenizer() -> PreTrainedTokenizerFast:
    """A SentencePiece-style tokenizer (Metaspace pre-tokenizer and decoder, Unigram), trained
    here: its decoder drops the leading space of the first word only."""
    tk = Tokenizer(models.Unigram())
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>"
    )
    tk.train_from_iterator(TEXTS * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def check_every_split(tok, rng: random.Random, trials: int = 1000) -> int:
    """extend_decoded against the whole decode on random id sequences and split points; how
    many took the seam (did not decode the whole again)."""
    vocab, specials = len(tok), list(tok.all_special_ids)
    seamed = 0
    whole = tok.decode

    for _ in range(trials):
        words = "".join(rng.choice(TEXTS) for _ in range(rng.randint(1, 4)))
        ids = tok.encode(words, add_special_tokens=False)
        odd = 1.0 if rng.random() < 0.2 else 0.15  # a policy may write any ids: some all random
        ids = [rng.randrange(vocab) if rng.random() < odd else i for i in ids]  # odd ids: cut characters
        if specials and rng.random() < 0.5:
            ids.insert(rng.randrange(len(ids) + 1), rng.choice(specials))
        cut = rng.randrange(len(ids) + 1)
        head, more = ids[:cut], ids[cut:]
        lengths: list[int] = []

        def counting(x, *a, lengths=lengths, **k):
            lengths.append(len(x))
            return whole(x, *a, **k)

        tok.decode = counting
        try:
            got = extend_decoded(tok, decode(tok, head), head, more) if head else None
        finally:
            del tok.decode
        if got is None:
            continue
        assert got == decode(tok, ids), (head, more)
        seamed += max(lengths[1:] or [0]) <= 4 * SEAM + len(more)
    return seamed


def test_byte_level_bpe_decodes_the_same_and_mostly_at_the_seam(tok):
    seamed = check_every_split(tok, random.Random(0))
    assert seamed > 500  # the shortcut is taken, not only the fallback


def test_a_metaspace_decoder_decodes_the_same():
    tok = metaspace_tokenizer()
    assert (
        decode(tok, tok.encode(" hello world", add_special_tokens=False)) == "hello world"
    )  # the first space
    seamed = check_every_split(tok, random.Random(1))
    assert seamed > 500


def test_an_episode_decodes_only_new_ids_each_call(hf, tok):
    """Eight turns of a growing chat: after the first call, no decode the gateway makes spans
    the context; every segment's text is its tail's whole decode."""
    replies = [f"Step {k}: " + TEXTS[k % len(TEXTS)] for k in range(8)]
    gw = Gateway(Scripted(hf, tok, replies), tok)
    eid = gw.open_episode()
    lengths: list[list[int]] = []
    whole = tok.decode

    def counting(x, *a, **k):
        lengths[-1].append(len(x))
        return whole(x, *a, **k)

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Go."}]

    async def run():
        for k in range(8):
            lengths.append([])
            tok.decode = counting
            try:
                res = await gw.chat(eid, ChatRequest(messages=messages, max_tokens=64))
            finally:
                del tok.decode
            messages.extend(
                [
                    {"role": "assistant", "content": res.content},
                    {"role": "user", "content": f"Turn {k} done."},
                ]
            )

    asyncio.run(run())
    (seg,) = gw.store.get(eid).segments
    assert seg.tail_text == decode(tok, seg.tail)
    context = len(seg.tail)
    assert context > 400
    ends = [len(c.prompt_ids) + len(c.completion_ids) for c in seg.calls]
    for k, seen in enumerate(lengths[1:], start=1):
        assert max(seen) <= 4 * SEAM + ends[k] - ends[k - 1], (k, seen)  # the new ids and a seam
    assert max(lengths[-1]) < context / 4  # where the whole tail would be `context` ids
    (traj,) = gw.end_episode(eid, reward=1.0)
    assert len(traj.turns) == 8


@pytest.mark.parametrize("text", ["", "x"])
def test_nothing_new_is_the_text_itself(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    assert extend_decoded(tok, decode(tok, ids), ids, []) == decode(tok, ids)
