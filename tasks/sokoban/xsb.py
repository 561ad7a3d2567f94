"""The standard Sokoban text format (XSB, as classic level collections write it) to rooms.

    #####           # wall        . goal            @ player
    #@$.#           space, - or _ floor             + player on a goal
    #####           $ box         * box on a goal

Levels are separated by blank lines. A line starting with ``;``, or a ``Key: value`` line
(``Title:``, ``Author:``, ...), is a comment, and names a level (`parse_levels`). Any other
line holding a ``#`` is a row of the level, and must hold only the cells above; text lines
without a ``#`` between levels (a collection's "Level 12") are passed over.

A room becomes the grid `game.Board` plays (verl-agent's symbols): rows padded to a
rectangle, the cells the player could reach if boxes did not block (walls do) are its inside,
everything else wall. The player must be walled in: a room whose inside reaches its edge is
refused, and so is a box or goal outside the walls, a room without exactly one player, or
with unequal boxes and goals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .game import BOX, BOX_ON_TARGET, FLOOR, PLAYER, PLAYER_ON_TARGET, TARGET, WALL, Board, BoardError

#: XSB cell → verl-agent's symbol (`game.SYMBOLS`).
CELLS = {
    "#": WALL,
    " ": FLOOR,
    "-": FLOOR,
    "_": FLOOR,
    ".": TARGET,
    "$": BOX,
    "*": BOX_ON_TARGET,
    "@": PLAYER,
    "+": PLAYER_ON_TARGET,
}
CELL_NAMES = "# wall, space - _ floor, . goal, $ box, * box on goal, @ player, + player on goal"
_META = re.compile(r"^[A-Za-z][A-Za-z ]*:")


class LevelFormatError(ValueError):
    """A level of a Sokoban text file is malformed (the message names the file's line)."""


@dataclass(frozen=True)
class Level:
    """One level of a file: its rows as written, where it starts, and its name if it has one."""

    rows: tuple[str, ...]
    line: int
    title: str = ""


def looks_like_levels(text: str) -> bool:
    """Whether `text` holds a Sokoban level: some line is a wall row (only ``#`` and floor,
    three walls or more), as the top of every closed level is."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.count("#") >= 3 and set(stripped) <= {"#", " ", "-", "_"}:
            return True
    return False


def parse_levels(text: str, source: str = "<text>") -> list[Level]:
    """The levels of a file in the format above (LevelFormatError names a malformed line).

    A comment names a level: the first one above it (`; 12`, as most collections write it),
    else one right below its rows (no blank line between: `Title:`, as others do)."""
    levels: list[Level] = []
    rows: list[str] = []
    above, start = "", 0
    below = False  # the comments of this block follow a level's rows: they are that level's

    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith(";") or _META.match(line):
            meta = _META.match(line)
            comment = line[meta.end() :].strip() if meta else line.lstrip().lstrip(";").strip()
            if rows:  # the level's rows end here
                named_below = bool(line.strip()) and not above
                levels.append(Level(tuple(rows), start, comment if named_below else above))
                rows, below = [], named_below
                above = comment if line.strip() and not named_below else ""
            elif not line.strip():
                below = False
            elif not below and not above:
                above = comment
            continue
        if "#" not in line:  # text between levels ("Level 12")
            continue
        bad = next(((c, ch) for c, ch in enumerate(line, 1) if ch not in CELLS), None)
        if bad is not None:
            raise LevelFormatError(
                f"{source}:{number}: {bad[1]!r} at column {bad[0]} is not a Sokoban cell; "
                f"cells are {CELL_NAMES} (comments start with ';')"
            )
        if not rows:
            start = number
        rows.append(line.replace("\t", " "))
    if rows:
        levels.append(Level(tuple(rows), start, above))
    return levels


def to_board(level: Level, source: str = "<text>") -> Board:
    """The room of a level (module doc); LevelFormatError says what does not fit."""
    where = f"{source}:{level.line}" + (f" ({level.title})" if level.title else "")
    width = max(len(r) for r in level.rows)
    grid = [r.ljust(width) for r in level.rows]
    players = [(r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch in "@+"]
    if len(players) != 1:
        raise LevelFormatError(f"{where}: a level has one player (@ or +), this one has {len(players)}")
    inside = _inside(grid, players[0])
    height = len(grid)
    edge = next(((r, c) for r, c in sorted(inside) if r in (0, height - 1) or c in (0, width - 1)), None)
    if edge is not None:
        raise LevelFormatError(
            f"{where}: the room is not closed by walls: the player can walk out at row "
            f"{edge[0] + 1}, column {edge[1] + 1}"
        )
    out: list[str] = []
    for r, row in enumerate(grid):
        cells = []
        for c, ch in enumerate(row):
            if (r, c) in inside:
                cells.append(CELLS[ch])
            elif ch in ".$*":
                raise LevelFormatError(
                    f"{where}: the {'box' if ch == '$' else 'goal'} at row {r + 1}, column {c + 1} "
                    "is outside the player's walls"
                )
            else:
                cells.append(WALL)
        out.append("".join(cells))
    try:
        return Board.parse(out)
    except BoardError as e:
        raise LevelFormatError(f"{where}: {e}") from None


def _inside(grid: list[str], start: tuple[int, int]) -> set[tuple[int, int]]:
    """The non-wall cells connected to `start` (boxes do not block: they can be pushed away)."""
    height, width = len(grid), len(grid[0])
    seen, todo = {start}, [start]
    while todo:
        r, c = todo.pop()
        for cell in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            inside = 0 <= cell[0] < height and 0 <= cell[1] < width
            if inside and grid[cell[0]][cell[1]] != "#" and cell not in seen:
                seen.add(cell)
                todo.append(cell)
    return seen
