"""GiGPO's anchor groups: which turns count as taken from one state, and how many share one.

Two ways to tell a turn's anchor state (the state it was taken from):

- by hash (the default): ``anchor_state_hashes``, equal hashes are one state. An env's
  ``state_hash`` depends on its state only, so this is exact where the env can say what its
  state is.
- by text similarity (``similarity_thresh``): ``anchor_observations``, the text the turn was
  taken from, clustered within each episode group the way verl-agent does it
  (``gigpo/core_gigpo.py``, ``build_step_group`` with ``enable_similarity`` and
  ``are_similar``): turns are visited in batch order, each joins the first cluster whose
  *first* member's text it matches, else starts a cluster; two texts match when
  ``difflib.SequenceMatcher(None, text, representative).ratio() >= similarity_thresh``
  (Ratcliff/Obershelp: 2·matched characters / total characters, with difflib's default
  "autojunk" heuristic for texts of 200+ characters). It pools observations that differ only
  in noise (a turn counter, a flavour line) that an exact hash keeps apart.

`anchor_group_stats` says whether a batch leaves GiGPO anything to do: with every anchor
group a singleton, the step term is 0 and GiGPO is GRPO by construction.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .layout import CreditError, IntArray, offsets_of
from .turns import discounted_returns

#: verl-agent's default ``similarity_thresh``.
VERL_AGENT_SIMILARITY_THRESH = 0.95


def state_ids_from_hashes(hashes: Sequence[Sequence[Any]]) -> IntArray:
    """Hash strings -> int ids, one per distinct state, flattened row by row; an unknown state
    (``""``) gets an id of its own, so it never matches anything."""
    table: dict[str, int] = {}
    ids = []
    for k, h in enumerate(s for row in hashes for s in row):
        ids.append(table.setdefault(str(h), len(table)) if h else -1 - k)
    return np.asarray(ids, dtype=np.int64)


def similar_state_ids(texts: Sequence[str], group_ids: Sequence[Any], thresh: float) -> IntArray:
    """verl-agent's similarity clustering of anchor texts (module docstring), one int id per
    cluster, in the order ``texts`` lists the turns (row by row, turn by turn: verl-agent's
    batch order). Only turns of one episode group (equal ``group_ids``) are ever clustered
    together. An empty text (no observation recorded) is alone in its cluster.

    Written here rather than taken from verl-agent, which is not a dependency; difflib (the
    standard library) does the measuring, as in verl-agent.
    """
    if not 0.0 < thresh < 1.0:
        raise CreditError(
            f"similarity_thresh must be in (0, 1) (verl-agent's range; 1 would be exact text match, "
            f"which the state hashes already give): got {thresh}"
        )
    if len(texts) != len(group_ids):
        raise CreditError(f"{len(texts)} anchor observations for {len(group_ids)} turns")
    # Per episode group, its clusters: a matcher holding the representative as its second
    # sequence (difflib caches its index of seq2) and the cluster's id.
    clusters: dict[Any, list[tuple[difflib.SequenceMatcher[str], int]]] = {}
    ids = np.empty(len(texts), dtype=np.int64)
    n_ids = 0
    for k, (text, group) in enumerate(zip(texts, group_ids, strict=True)):
        if not isinstance(text, str):
            raise CreditError(f"anchor observations must be text; turn {k} has {type(text).__name__}")
        if not text:
            ids[k], n_ids = n_ids, n_ids + 1
            continue
        found = clusters.setdefault(group, [])
        ids[k] = _first_similar(found, text, thresh)
        if ids[k] < 0:
            found.append((difflib.SequenceMatcher(None, "", text), n_ids))
            ids[k], n_ids = n_ids, n_ids + 1
    return ids


def _first_similar(clusters: list[tuple[difflib.SequenceMatcher[str], int]], text: str, thresh: float) -> int:
    """Id of the first cluster whose representative ``text`` matches, else -1."""
    for matcher, cid in clusters:
        matcher.set_seq1(text)
        # real_quick_ratio and quick_ratio bound ratio from above: same answer, fewer full matches
        if (
            matcher.real_quick_ratio() >= thresh
            and matcher.quick_ratio() >= thresh
            and matcher.ratio() >= thresh
        ):
            return cid
    return -1


def anchor_state_ids(
    hashes: Any, observations: Any, groups: IntArray, lengths: list[int], similarity_thresh: float | None
) -> IntArray:
    """One int per turn (flat, row by row) naming its anchor state: from the state hashes, or,
    given a ``similarity_thresh``, from the anchor observation texts clustered as verl-agent
    does (`similar_state_ids`)."""
    if similarity_thresh is None:
        return state_ids_from_hashes([_per_turn("anchor_state_hashes", hashes, lengths)])
    if observations is None:
        raise CreditError(
            "gigpo with enable_similarity needs anchor_observations (per row, the text each turn "
            "was taken from); arborl.trainer.dataproto puts it in non_tensor_batch"
        )
    texts = _per_turn("anchor_observations", observations, lengths)
    return similar_state_ids(texts, np.repeat(groups, lengths).tolist(), similarity_thresh)


def _per_turn(name: str, rows: Any, lengths: list[int]) -> list[Any]:
    """A per-row field flattened to one entry per turn, once its rows match the mask's turns."""
    rows = [list(r) for r in rows]
    if [len(r) for r in rows] != lengths:
        raise CreditError(f"{name} has {[len(r) for r in rows]} turns per row; the mask has {lengths}")
    return [x for r in rows for x in r]


def anchor_group_stats(
    group_ids: Sequence[Any],
    state_ids: Sequence[int],
    episode_ids: Sequence[Any] | None = None,
    returns: Sequence[float] | None = None,
) -> dict[str, float]:
    """How much a batch's anchor groups (turns of one episode group from one state) pool.

    Returns ``turns_shared`` (fraction of turns whose anchor group has another turn),
    ``group_size`` (mean turns per anchor group) and ``groups`` (their number); all 0 for no
    turns. Given each turn's ``episode_ids``, it separates the two ways a group forms:
    ``turns_recurring`` (the group holds turns of at least two episodes: a state that recurs
    across the group's episodes, what GiGPO compares) and ``turns_repeated`` (every other turn
    of the group is the same episode's: an agent repeating itself in place). Given each turn's
    discounted ``returns`` (GiGPO's ``G``), ``step_nonzero`` is the fraction of turns whose step
    advantage is not 0, i.e. whose return differs from its anchor group's mean: the turns the
    step term actually moves (its normalisation does not change which ones).
    """
    keys = list(zip(group_ids, state_ids, strict=True))
    if not keys:
        out = {"turns_shared": 0.0, "group_size": 0.0, "groups": 0.0}
        if episode_ids is not None:
            out |= {"turns_recurring": 0.0, "turns_repeated": 0.0}
        return out | ({"step_nonzero": 0.0} if returns is not None else {})
    sizes: dict[tuple[Any, int], int] = {}
    for key in keys:
        sizes[key] = sizes.get(key, 0) + 1
    shared = sum(1 for key in keys if sizes[key] > 1)
    out = {
        "turns_shared": shared / len(keys),
        "group_size": len(keys) / len(sizes),
        "groups": float(len(sizes)),
    }
    if episode_ids is not None:
        episodes: dict[tuple[Any, int], set[Any]] = {}
        for key, e in zip(keys, episode_ids, strict=True):
            episodes.setdefault(key, set()).add(e)
        recurring = sum(1 for key in keys if len(episodes[key]) > 1)
        out["turns_recurring"] = recurring / len(keys)
        out["turns_repeated"] = (shared - recurring) / len(keys)
    if returns is not None:
        total: dict[tuple[Any, int], float] = {}
        for key, g in zip(keys, returns, strict=True):
            total[key] = total.get(key, 0.0) + float(g)
        moved = sum(
            1
            for key, g in zip(keys, returns, strict=True)
            if sizes[key] > 1 and abs(float(g) - total[key] / sizes[key]) > 1e-9 * max(1.0, abs(float(g)))
        )
        out["step_nonzero"] = moved / len(keys)
    return out


def similarity_thresh_of(options: Mapping[str, Any]) -> float | None:
    """The similarity threshold gigpo's keyword ``options`` (``algorithm.estimator_options``)
    turn on, or None when they group anchors by hash."""
    if not options.get("enable_similarity"):
        return None
    thresh = options.get("similarity_thresh")
    return VERL_AGENT_SIMILARITY_THRESH if thresh is None else float(thresh)


def batch_anchor_stats(
    group_ids: Sequence[Any],
    hashes: Sequence[Sequence[str]],
    observations: Sequence[Sequence[str]],
    similarity_thresh: float | None = None,
    rewards: Sequence[Sequence[float]] | None = None,
    gamma: float = 1.0,
) -> dict[str, float]:
    """`anchor_group_stats` of a batch given per row (one episode each): its episode group, and
    per turn its anchor state hash and anchor observation; the anchors grouped as gigpo groups
    them (by hash, or by text similarity given ``similarity_thresh``). With each turn's
    ``rewards``, also the share of turns GiGPO's step term moves at discount ``gamma``."""
    lengths = [len(h) for h in hashes]
    _, groups = np.unique(np.asarray([str(g) for g in group_ids], dtype=object), return_inverse=True)
    states = anchor_state_ids(hashes, observations, groups, lengths, similarity_thresh)
    returns = None
    if rewards is not None:
        flat = np.asarray([r for row in rewards for r in row], dtype=np.float64)
        returns = discounted_returns(flat, offsets_of(lengths), gamma).tolist()
    episodes = np.repeat(np.arange(len(lengths)), lengths).tolist()
    return anchor_group_stats(np.repeat(groups, lengths).tolist(), states.tolist(), episodes, returns)
