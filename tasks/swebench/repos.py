"""Where an instance's repository comes from: a git bundle, a bare mirror, or a checkout.

    source = find_repository("django/django", ["/data/repos"])   # a RepoSource
    files = source.files_at("0123abc...")                        # path → bytes, binary-safe
    bundle = source.bundle()                                      # for instance images

Looked for in each directory, in this order: `<owner>__<name>.bundle` (`git bundle create
X.bundle --all`), `<owner>__<name>.git` or `<owner>__<name>` as a bare mirror (`git clone
--mirror`), `<owner>__<name>/.git` (a checkout). Files are read from git objects (`ls-tree` +
`cat-file`), not `git archive`, so `.gitattributes` `export-ignore` / `export-subst` do not
change them; submodules are left out, symlinks are listed in `symlinks`.
"""

from __future__ import annotations

import hashlib
import os
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


def find_repository(repo: str, repos_dirs: Sequence[str | Path]) -> RepoSource:
    """The first bundle, bare mirror or checkout of `repo` ('owner/name') in `repos_dirs`."""
    slug = repo.replace("/", "__")
    for root in map(Path, repos_dirs):
        if (root / f"{slug}.bundle").is_file():
            return RepoSource(repo, root / f"{slug}.bundle", "bundle")
        for name in (f"{slug}.git", slug):
            if _is_bare(root / name):
                return RepoSource(repo, root / name, "mirror")
        if (root / slug / ".git").exists():
            return RepoSource(repo, root / slug, "checkout")
    places = ", ".join(map(str, repos_dirs)) or "no directory (set swe.repos_dir)"
    raise RepositoryNotFound(
        f"no {slug}.bundle, {slug}.git / {slug} bare mirror, or {slug}/.git checkout in {places}"
    )
