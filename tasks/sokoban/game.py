"""Sokoban's rules and reward, as gym-sokoban plays them and verl-agent scores them (pure Python).

A `Board` is the room's fixed part (walls, floor, targets) and its moving part (the player,
the boxes). `push(board, direction)` is gym-sokoban's `SokobanEnv._push`/`_move`
(gym_sokoban/envs/sokoban_env.py, mpSchrader/gym-sokoban @ 8e06e44, lines 94-156): step the
player one cell; a box in the way is pushed when the cell behind it is free floor or an
empty target, otherwise nothing moves.

The reward of a move is gym-sokoban's `_calc_reward` (same file, lines 33-37 and 158-186):

    reward = -0.1                       every step (penalty_for_step)
           + 1   if a box went onto a target     (reward_box_on_target)
           - 1   if a box left a target          (penalty_box_off_target)
           + 10  if every box is on a target     (reward_finished)

verl-agent adds, per turn, what `reward_of_reply` documents (an unparsable reply).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

WALL, FLOOR, TARGET = "#", "_", "O"
BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET = "X", "√", "P", "S"
#: The cell symbols of verl-agent's text grid (its SokobanEnv.GRID_LOOKUP, codes 0-6).
SYMBOLS = (WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER, PLAYER_ON_TARGET)

#: (row, column) change of each move; verl-agent's action ids 1-4 are Up, Down, Left, Right.
DIRECTIONS: dict[str, tuple[int, int]] = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}

STEP_PENALTY = -0.1
BOX_ON_TARGET_REWARD = 1.0
BOX_OFF_TARGET_PENALTY = -1.0
FINISHED_REWARD = 10.0

Cell = tuple[int, int]


class BoardError(ValueError):
    """A room's text is not a Sokoban room (the message says what is wrong)."""


@dataclass(frozen=True)
class Board:
    """A room: its fixed cells and where the player and the boxes stand."""

    walls: frozenset[Cell]
    targets: frozenset[Cell]
    player: Cell
    boxes: frozenset[Cell]
    height: int
    width: int

    @classmethod
    def parse(cls, rows: list[str] | tuple[str, ...]) -> Board:
        """A board from rows of `SYMBOLS`, one character a cell."""
        if not rows or len({len(r) for r in rows}) != 1:
            raise BoardError(f"a room is a non-empty rectangle of cells, got rows {list(rows)!r}")
        walls, targets, boxes, players = set(), set(), set(), []
        for r, row in enumerate(rows):
            for c, ch in enumerate(row):
                if ch not in SYMBOLS:
                    raise BoardError(f"unknown cell {ch!r} at ({r}, {c}); cells are {''.join(SYMBOLS)}")
                if ch == WALL:
                    walls.add((r, c))
                if ch in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET):
                    targets.add((r, c))
                if ch in (BOX, BOX_ON_TARGET):
                    boxes.add((r, c))
                if ch in (PLAYER, PLAYER_ON_TARGET):
                    players.append((r, c))
        if len(players) != 1 or not boxes or len(boxes) != len(targets):
            raise BoardError(
                f"a room has one player and as many boxes as targets: {len(players)} players, "
                f"{len(boxes)} boxes, {len(targets)} targets"
            )
        return cls(
            frozenset(walls), frozenset(targets), players[0], frozenset(boxes), len(rows), len(rows[0])
        )

    def rows(self) -> tuple[str, ...]:
        """The room as rows of `SYMBOLS` (what `parse` reads)."""
        return self._rows

    @cached_property
    def _rows(self) -> tuple[str, ...]:
        # Drawn once per board: the env renders every board twice (grid, state hash).
        grid = [[FLOOR] * self.width for _ in range(self.height)]
        for r, c in self.walls:
            grid[r][c] = WALL
        for r, c in self.targets:
            grid[r][c] = TARGET
        for r, c in self.boxes:
            grid[r][c] = BOX_ON_TARGET if (r, c) in self.targets else BOX
        r, c = self.player
        grid[r][c] = PLAYER_ON_TARGET if self.player in self.targets else PLAYER
        return tuple("".join(row) for row in grid)

    def symbol(self, cell: Cell) -> str:
        on_target = cell in self.targets
        if cell in self.walls:
            return WALL
        if cell == self.player:
            return PLAYER_ON_TARGET if on_target else PLAYER
        if cell in self.boxes:
            return BOX_ON_TARGET if on_target else BOX
        return TARGET if on_target else FLOOR

    def boxes_on_target(self) -> int:
        return len(self.boxes & self.targets)

    def solved(self) -> bool:
        return self.boxes <= self.targets

    def free(self, cell: Cell) -> bool:
        """Floor or an empty target inside the room: where a player may step or a box go."""
        r, c = cell
        inside = 0 <= r < self.height and 0 <= c < self.width
        return inside and cell not in self.walls and cell not in self.boxes


def push(board: Board, direction: str) -> Board:
    """The board after one move of the player (gym-sokoban's push-or-move)."""
    dr, dc = DIRECTIONS[direction]
    ahead = (board.player[0] + dr, board.player[1] + dc)
    if ahead in board.boxes:
        beyond = (ahead[0] + dr, ahead[1] + dc)
        if not board.free(beyond):
            return board
        boxes = (board.boxes - {ahead}) | {beyond}
        return Board(board.walls, board.targets, ahead, frozenset(boxes), board.height, board.width)
    if not board.free(ahead):
        return board
    return Board(board.walls, board.targets, ahead, board.boxes, board.height, board.width)


def move_reward(before: Board, after: Board) -> float:
    """gym-sokoban's reward of the step from `before` to `after` (module doc)."""
    reward = STEP_PENALTY
    on_before, on_after = before.boxes_on_target(), after.boxes_on_target()
    if on_after > on_before:
        reward += BOX_ON_TARGET_REWARD
    elif on_after < on_before:
        reward += BOX_OFF_TARGET_PENALTY
    if after.solved():
        reward += FINISHED_REWARD
    return reward


def render_grid(board: Board) -> str:
    """The text observation verl-agent gives its model (its `tiny_rgb_array` render mode):
    each cell as ``" <symbol> \\t"``, rows joined by newlines."""
    return _grid(board.rows())


@lru_cache(maxsize=4096)
def _grid(rows: tuple[str, ...]) -> str:
    return "\n".join("".join(f" {ch} \t" for ch in row) for row in rows)
