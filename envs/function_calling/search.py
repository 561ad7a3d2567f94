"""A small BM25 index over a task suite's corpus (pure Python, built once per corpus)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from arborl.tasks import Document, load_corpus

_TOKEN = re.compile(r"\w+", re.UNICODE)


def tokens(text: str) -> list[str]:
    return [t.casefold() for t in _TOKEN.findall(text)]


class BM25:
    """Okapi BM25 (k1=1.5, b=0.75) over title + text."""

    def __init__(self, docs: Sequence[Document], k1: float = 1.5, b: float = 0.75) -> None:
        self.docs = list(docs)
        self.k1, self.b = k1, b
        self.tf = [Counter(tokens(f"{d.title} {d.text}")) for d in self.docs]
        self.lengths = [sum(tf.values()) for tf in self.tf]
        self.avg_len = (sum(self.lengths) / len(self.lengths)) if self.lengths else 0.0
        df: Counter[str] = Counter()
        for tf in self.tf:
            df.update(tf.keys())
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def search(self, query: str, k: int = 3) -> list[tuple[float, Document]]:
        terms = [t for t in tokens(query) if t in self.idf]
        scored = []
        for i, tf in enumerate(self.tf):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * self.lengths[i] / (self.avg_len or 1.0))
            for t in terms:
                f = tf.get(t, 0)
                if f:
                    s += self.idf[t] * f * (self.k1 + 1) / (f + norm)
            if s > 0:
                scored.append((s, i))
        scored.sort(key=lambda x: (-x[0], x[1]))
        return [(s, self.docs[i]) for s, i in scored[:k]]


@lru_cache(maxsize=16)
def index_for_path(path: str) -> BM25:
    """The index of a JSONL corpus file, built on first use and shared by every episode."""
    return BM25(load_corpus(path))


@lru_cache(maxsize=64)
def index_for_docs(docs: tuple[Document, ...]) -> BM25:
    return BM25(docs)
