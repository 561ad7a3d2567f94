"""Where an instance's repository comes from: a git bundle, a bare mirror, or a checkout.

    source = find_repository("django/django", ["/data/repos"])   # a RepoSource
    files = source.files_at("0123abc...")                        # path → bytes, binary-safe
    bundle = source.bundle()                                      # for instance images

Each entry of `repos_dirs` is a directory or a mapping file. In a directory, in this order:

1. by name: `<owner>__<name>.bundle` (`git bundle create X.bundle --all`), `<owner>__<name>.git`
   or `<owner>__<name>` as a bare mirror (`git clone --mirror`), `<owner>__<name>/.git` (a
   checkout); the same under `<owner>/<name>` (`<owner>/<name>.bundle`, `<owner>/<name>.git`,
   `<owner>/<name>`);
2. by remote: any bare repository or checkout one or two levels down whose remote URL
   (`remote.*.url` in its git config) ends in `<owner>/<name>` (`https://github.com/o/n.git`,
   `git@github.com:o/n.git`), whatever the folder is called.

A mapping file (`.json`) names each repository's place itself, for copies without a remote
(bundles, fetched mirrors): `{"owner/name": "path"}`, a path relative to the file, pointing at
a bundle, a bare repository or a checkout.

Files are read from git objects (`ls-tree` + `cat-file`), not `git archive`, so
`.gitattributes` `export-ignore` / `export-subst` do not change them; submodules are left out,
symlinks are listed in `symlinks`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


class RepositoryNotFound(FileNotFoundError):
    """No bundle, mirror or checkout of a repository where one was looked for."""


@dataclass(frozen=True)
class RepoFiles:
    """A tree at one commit: regular files (bytes), which are executable, and symlinks."""

    files: dict[str, bytes]
    executable: frozenset[str] = frozenset()
    symlinks: dict[str, str] = field(default_factory=dict)


def _git(git_dir: Path, *args: str, input: bytes | None = None) -> bytes:
    r = subprocess.run(["git", f"--git-dir={git_dir}", *args], input=input, capture_output=True)
    if r.returncode != 0:
        raise RepositoryNotFound(
            f"git {' '.join(args[:2])} in {git_dir} failed: {r.stderr.decode(errors='replace')[-300:]}"
        )
    return r.stdout


def _is_bare(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


def _cache_root() -> Path:
    return Path(os.environ.get("ARBORL_CACHE", Path.home() / ".cache" / "arborl")) / "repos"


@dataclass(frozen=True)
class RepoSource:
    """One repository on the host: `kind` is bundle, mirror or checkout."""

    repo: str
    path: Path
    kind: str

    def git_dir(self) -> Path:
        """A git directory to read objects from (a bundle is cloned once into the cache)."""
        if self.kind == "checkout":
            return self.path / ".git"
        if self.kind == "mirror":
            return self.path
        digest = hashlib.sha256(self.path.read_bytes()).hexdigest()[:16]
        dest = _cache_root() / f"{self.path.stem}-{digest}.git"
        if not _is_bare(dest):
            tmp = dest.with_name(dest.name + f".partial-{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.parent.mkdir(parents=True, exist_ok=True)
            r = subprocess.run(
                ["git", "clone", "-q", "--mirror", str(self.path), str(tmp)], capture_output=True
            )
            if r.returncode != 0:
                raise RepositoryNotFound(f"{self.path} is not a git bundle: {r.stderr.decode()[-300:]}")
            try:
                tmp.rename(dest)
            except OSError:  # another process made it first
                shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def bundle(self) -> bytes:
        """The repository as one git bundle (all refs)."""
        if self.kind == "bundle":
            return self.path.read_bytes()
        return _git(self.git_dir(), "bundle", "create", "-", "--all")

    def files_at(self, commit: str) -> RepoFiles:
        """Every file of `commit`, as bytes (binary files included)."""
        git_dir = self.git_dir()
        listing = _git(git_dir, "ls-tree", "-r", "-z", "--full-tree", commit)
        entries: list[tuple[str, bytes, str]] = []
        for item in listing.split(b"\0"):
            if not item:
                continue
            meta, _, raw_path = item.partition(b"\t")
            mode, kind, sha = meta.split()
            if kind == b"blob":
                entries.append((mode.decode(), sha, raw_path.decode("utf-8", errors="surrogateescape")))
        if not entries:
            return RepoFiles({})
        batch = _git(git_dir, "cat-file", "--batch", input=b"".join(sha + b"\n" for _, sha, _ in entries))
        files: dict[str, bytes] = {}
        symlinks: dict[str, str] = {}
        at = 0
        for file_mode, _sha, path in entries:
            header_end = batch.index(b"\n", at)
            size = int(batch[at:header_end].split()[2])
            data = batch[header_end + 1 : header_end + 1 + size]
            at = header_end + 1 + size + 1  # the content is followed by a newline
            if file_mode == "120000":
                symlinks[path] = data.decode("utf-8", errors="surrogateescape")
            else:
                files[path] = data
        executable = frozenset(p for m, _, p in entries if m == "100755")
        return RepoFiles(files, executable, symlinks)


def _source_at(repo: str, path: Path) -> RepoSource | None:
    """`path` as a bundle, bare repository or checkout of `repo` (None if it is none of them)."""
    if path.is_file():
        return RepoSource(repo, path, "bundle")
    if _is_bare(path):
        return RepoSource(repo, path, "mirror")
    if (path / ".git").exists():
        return RepoSource(repo, path, "checkout")
    return None


def _by_name(repo: str, root: Path) -> RepoSource | None:
    owner, _, name = repo.partition("/")
    slug = repo.replace("/", "__")
    for stem in (root / slug, root / owner / name):
        if (stem.parent / f"{stem.name}.bundle").is_file():
            return RepoSource(repo, stem.parent / f"{stem.name}.bundle", "bundle")
        for path in (stem.parent / f"{stem.name}.git", stem):
            if _is_bare(path):
                return RepoSource(repo, path, "mirror")
        if (stem / ".git").exists():
            return RepoSource(repo, stem, "checkout")
    return None


class RepositoryMapError(ValueError):
    """A mapping file of `swe.repos_dir` is not a JSON object of "owner/name" → path."""


def _from_mapping(repo: str, mapping_file: Path) -> RepoSource | None:
    try:
        table = json.loads(mapping_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RepositoryMapError(f"{mapping_file}: not a JSON mapping of repositories ({e})") from None
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise RepositoryMapError(f'{mapping_file}: expected {{"owner/name": "path", ...}}')
    if repo not in table:
        return None
    path = (mapping_file.parent / table[repo]).resolve()
    source = _source_at(repo, path)
    if source is None:
        raise RepositoryNotFound(
            f"{mapping_file} maps {repo} to {path}, which is no git bundle, bare repository or checkout"
        )
    return source


# `…github.com/owner/name.git`, `git@host:owner/name`, `ssh://host/owner/name/`: the last two parts
_REMOTE_TAIL = re.compile(r"[/:]([^/:]+)/([^/:]+?)(?:\.git)?/?$")


def remote_names(git_dir: Path) -> set[str]:
    """The `owner/name` each remote URL of a git directory names (lower case)."""
    config = git_dir / "config"
    if not config.is_file():
        return set()
    r = subprocess.run(
        ["git", "config", "--file", str(config), "--get-regexp", r"^remote\..*\.url$"],
        capture_output=True,
        text=True,
    )
    names = set()
    for line in r.stdout.splitlines():
        m = _REMOTE_TAIL.search(line.partition(" ")[2].strip())
        if m:
            names.add(f"{m.group(1)}/{m.group(2)}".lower())
    return names


def _git_dirs_below(root: Path, depth: int = 2) -> list[tuple[Path, Path]]:
    """(repository path, its git directory) for bare repositories and checkouts under `root`."""
    found: list[tuple[Path, Path]] = []
    level = [root]
    for _ in range(depth):
        nxt = []
        for folder in level:
            try:
                children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:
                continue
            for child in children:
                if _is_bare(child):
                    found.append((child, child))
                elif (child / ".git").is_dir():
                    found.append((child, child / ".git"))
                else:
                    nxt.append(child)
        level = nxt
    return found


def _by_remote(repo: str, root: Path) -> RepoSource | None:
    for path, git_dir in _git_dirs_below(root):
        if repo.lower() in remote_names(git_dir):
            return RepoSource(repo, path, "mirror" if path == git_dir else "checkout")
    return None


def find_repository(repo: str, repos_dirs: Sequence[str | Path]) -> RepoSource:
    """The first bundle, bare mirror or checkout of `repo` ('owner/name') in `repos_dirs`
    (directories, searched by name then by remote, or mapping files: see the module doc)."""
    roots = list(map(Path, repos_dirs))
    for root in roots:
        source = _from_mapping(repo, root) if root.is_file() else _by_name(repo, root)
        if source is not None:
            return source
    for root in roots:
        if root.is_dir():
            source = _by_remote(repo, root)
            if source is not None:
                return source
    slug = repo.replace("/", "__")
    places = ", ".join(map(str, repos_dirs)) or "no directory (set swe.repos_dir)"
    raise RepositoryNotFound(
        f"no {slug}.bundle, {slug}.git / {slug} bare mirror or {slug}/.git checkout (nor the same "
        f"under {repo}), and no repository whose remote is {repo}, in {places}; a copy under another "
        f'name needs a mapping file in swe.repos_dir: a .json file {{"{repo}": "path/to/it"}}'
    )
