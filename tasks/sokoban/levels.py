"""Seeded room generation: gym-sokoban's recipe (the one verl-agent and RAGEN call), redone
with a per-level RNG and a solver check.

gym-sokoban's `generate_room` (gym_sokoban/envs/room_utils.py, mpSchrader/gym-sokoban @
8e06e44; verl-agent and RAGEN call a copy of it, `ragen/env/sokoban/utils.py`):

1. topology: a random walk of `int(1.7 * (height + width))` steps (20 for 6x6) from a random
   inner cell, changing direction with probability 0.35, stamps one of five 3x3 floor masks
   at every step; the border stays wall;
2. the player and the box's target go on random floor cells, the box on its target;
3. reverse play: the player walks and *pulls* the box, up to `search_depth` moves (verl-agent:
   30); the room kept is the one whose box is farthest (Manhattan) from its target, with the
   box and the player off the target. A room whose box cannot be pulled at all is redrawn.

Why not gym-sokoban itself: it imports `gym` 0.26 (unmaintained, and its package init needs
`pkg_resources`), keeps its search state in module globals and draws from the process-wide
`random`/`np.random`, so a level is only reproducible by reseeding the whole process. Here
each level has its own `random.Random(seed)`, the reverse search is a breadth-first search
over (player, box) states (gym-sokoban: a depth-first one), and among the farthest rooms one
is drawn with the player anywhere it can walk to (gym-sokoban leaves it next to the box;
RAGEN walks it up to three steps away for the same reason). Every room is then solved
forward by `solver.solve`: a room is kept only when its shortest solution fits the turn
budget (`max_moves`), so a suite's gold policy always wins.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from .game import DIRECTIONS, Board, Cell
from .solver import solve

#: The floor masks stamped along the walk (gym-sokoban's `room_topology_generation`).
MASKS = (
    ("...", "###", "..."),
    (".#.", ".#.", ".#."),
    ("...", "##.", ".#."),
    ("...", "##.", "##."),
    ("...", ".##", ".#."),
)
CHANGE_DIRECTION = 0.35
SEARCH_DEPTH = 30  # verl-agent's env.sokoban.search_depth
ATTEMPTS = 100


class GenerationError(RuntimeError):
    """No room came out of a seed after `ATTEMPTS` tries (a room too small for its parts)."""


@dataclass(frozen=True)
class Level:
    """A generated room and a shortest solution of it."""

    board: Board
    solution: tuple[str, ...]


def generate_level(
    seed: int | str, size: tuple[int, int] = (6, 6), search_depth: int = SEARCH_DEPTH, max_moves: int = 15
) -> Level:
    """The level of `seed` (the same seed, the same level): one box, solvable in at most
    `max_moves` moves."""
    rng = random.Random(f"sokoban:{size[0]}x{size[1]}:{search_depth}:{seed}")
    for _ in range(ATTEMPTS):
        floor = _topology(rng, size)
        if len(floor) < 3:
            continue
        player, target = rng.sample(sorted(floor), 2)
        walls = frozenset((r, c) for r in range(size[0]) for c in range(size[1])) - floor
        solved = Board(walls, frozenset({target}), player, frozenset({target}), size[0], size[1])
        board = _pull_away(rng, solved, search_depth)
        if board is None:
            continue
        moves = solve(board, max_depth=max_moves)
        if moves:
            return Level(board, tuple(moves))
    raise GenerationError(f"no solvable {size} room from seed {seed!r} in {ATTEMPTS} tries")


def _topology(rng: random.Random, size: tuple[int, int]) -> frozenset[Cell]:
    """The floor cells of a random walk of stamped masks (step 1 of the module doc)."""
    h, w = size
    directions = list(DIRECTIONS.values())
    direction = rng.choice(directions)
    pos = [rng.randint(1, h - 1), rng.randint(1, w - 1)]
    floor: set[Cell] = set()
    for _ in range(int(1.7 * (h + w))):
        if rng.random() < CHANGE_DIRECTION:
            direction = rng.choice(directions)
        pos = [min(max(pos[0] + direction[0], 1), h - 2), min(max(pos[1] + direction[1], 1), w - 2)]
        mask = rng.choice(MASKS)
        for dr, line in enumerate(mask):
            for dc, ch in enumerate(line):
                if ch == "#":
                    floor.add((pos[0] + dr - 1, pos[1] + dc - 1))
    return frozenset((r, c) for r, c in floor if 0 < r < h - 1 and 0 < c < w - 1)


def _pull_away(rng: random.Random, solved: Board, depth: int) -> Board | None:
    """Reverse play from the solved room (step 3): the farthest-pulled rooms, one drawn."""
    (target,) = solved.targets
    start = (solved.player, next(iter(solved.boxes)))
    seen = {start}
    frontier = deque([(start, 0)])
    best: list[tuple[Cell, Cell]] = []
    best_distance = 0
    while frontier:
        (player, box), d = frontier.popleft()
        distance = abs(box[0] - target[0]) + abs(box[1] - target[1])
        if distance > 0 and player != target:
            if distance > best_distance:
                best, best_distance = [], distance
            if distance == best_distance:
                best.append((player, box))
        if d >= depth:
            continue
        for nxt in _reverse_moves(solved, player, box):
            if nxt not in seen:
                seen.add(nxt)
                frontier.append((nxt, d + 1))
    if not best:
        return None
    player, box = rng.choice(sorted(best))
    return Board(solved.walls, solved.targets, player, frozenset({box}), solved.height, solved.width)


def _reverse_moves(room: Board, player: Cell, box: Cell) -> list[tuple[Cell, Cell]]:
    """States one reverse move away: the player steps to a free cell, pulling the box behind
    it or not."""
    out = []
    for dr, dc in DIRECTIONS.values():
        to = (player[0] + dr, player[1] + dc)
        if to in room.walls or to == box or not (0 <= to[0] < room.height and 0 <= to[1] < room.width):
            continue
        out.append((to, box))
        if box == (player[0] - dr, player[1] - dc):
            out.append((to, player))
    return out
