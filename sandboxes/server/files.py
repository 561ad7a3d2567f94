"""File operations, done with the credentials of whoever asked for them.

The server is root; the paths it is given lie in trees the agent writes. An agent's request
(the default) runs with the agent's filesystem credentials: `setfsuid`/`setfsgid` change
them for the calling thread only (the kernel keeps credentials per thread, and glibc does
not broadcast these two calls), which also drops root's file capabilities for the duration.
A symlink the agent planted can then lead only where the agent could go itself. A root
request (harness setup) never follows a symlink: each path component is opened with
O_NOFOLLOW below a directory file descriptor, so the agent cannot redirect it either.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import errno
import io
import os
import stat
import tarfile
from collections.abc import Iterator

_libc = ctypes.CDLL(None, use_errno=True)
_QUERY = ctypes.c_uint(0xFFFFFFFF).value  # an invalid id: setfs*id then only reports


class Credentials:
    """The agent's uid/gid, and the switch to them for one thread."""

    def __init__(self, uid: int | None, gid: int | None) -> None:
        self.uid, self.gid = uid, gid

    @contextlib.contextmanager
    def of(self, user: str | None) -> Iterator[None]:
        if user == "root" or self.uid is None or self.gid is None or os.geteuid() != 0:
            yield
            return
        _libc.setfsgid(self.gid)
        _libc.setfsuid(self.uid)
        try:
            if _libc.setfsuid(_QUERY) != self.uid or _libc.setfsgid(_QUERY) != self.gid:
                raise PermissionError("cannot take the agent's filesystem credentials")
            yield
        finally:
            _libc.setfsuid(0)
            _libc.setfsgid(0)


def _parts(path: str) -> list[str]:
    if not os.path.isabs(path):
        raise ValueError(f"path must be absolute: {path!r}")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"path must not contain '..': {path!r}")
    if not parts:
        raise ValueError("path is the root directory")
    return parts


def _refuse_link(path: str, e: OSError) -> OSError:
    if e.errno in (errno.ELOOP, errno.ENOTDIR):
        return PermissionError(f"refusing to follow a symbolic link on the way to {path}")
    return e


def open_nofollow(
    path: str,
    flags: int,
    mode: int = 0o644,
    make_parents: bool = False,
    parent_owner: tuple[int, int] | None = None,
) -> int:
    """os.open that follows no symlink in any component; can create missing parents."""
    parts = _parts(path)
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        for name in parts[:-1]:
            try:
                nfd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not make_parents:
                    raise
                os.mkdir(name, 0o755, dir_fd=fd)
                if parent_owner is not None:
                    os.chown(name, *parent_owner, dir_fd=fd, follow_symlinks=False)
                nfd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as e:
                raise _refuse_link(path, e) from e
            os.close(fd)
            fd = nfd
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
        except OSError as e:
            raise _refuse_link(path, e) from e
    finally:
        os.close(fd)


def _open(
    path: str, flags: int, as_root: bool, mode: int = 0o644, parent_owner: tuple[int, int] | None = None
) -> int:
    if as_root:
        return open_nofollow(
            path, flags, mode, make_parents=bool(flags & os.O_CREAT), parent_owner=parent_owner
        )
    if flags & os.O_CREAT:
        os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
    return os.open(path, flags | os.O_CLOEXEC, mode)


def _regular(fd: int, path: str) -> int:
    """`fd`, opened without blocking, once it is known to be a regular file, in blocking mode.

    Opening a FIFO blocks until its other end opens, and the agent can put one at any path
    the harness reads or writes: it would hold a worker (and the harness's call) forever.
    """
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise IsADirectoryError(f"{path} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def read_file(req: dict, creds: Credentials) -> dict:
    path, user = req["path"], req.get("user")
    max_bytes = int(req.get("max_bytes", 64 * 1024 * 1024))
    with creds.of(user):
        fd = _regular(_open(path, os.O_RDONLY | os.O_NONBLOCK, as_root=user == "root"), path)
        with os.fdopen(fd, "rb") as f:
            data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        return {"ok": False, "error": f"{path} is larger than {max_bytes} bytes", "kind": "too_large"}
    return {"ok": True, "data": base64.b64encode(data).decode()}


def write_file(req: dict, creds: Credentials) -> dict:
    path, user = req["path"], req.get("user")
    as_root = user == "root"
    # Directories a root write creates still belong to the agent, who works in them.
    owner = (creds.uid, creds.gid) if creds.uid is not None and creds.gid is not None else None
    with creds.of(user):
        try:
            fd = _open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, as_root, parent_owner=owner)
        except OSError as e:
            if e.errno == errno.ENXIO:  # a FIFO nobody reads
                raise IsADirectoryError(f"{path} is not a regular file") from e
            raise
        fd = _regular(fd, path)
        os.ftruncate(fd, 0)
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(req["data"]))
            if "mode" in req:
                os.fchmod(f.fileno(), int(req["mode"]))
            if as_root and req.get("owner") == "agent" and owner is not None:
                os.fchown(f.fileno(), *owner)
    return {"ok": True}


def _extract_safely(tar: tarfile.TarFile, dest: str) -> None:
    """Extract refusing absolute paths, `..` escapes, outside links and device nodes.

    Uses tarfile's "data" filter where this Python has it (3.11.4+); Debian bookworm's
    3.11.2 does not, so the same rules are checked here first.
    """
    root = os.path.realpath(dest)
    for m in tar.getmembers():
        target = os.path.realpath(os.path.join(root, m.name))
        if os.path.isabs(m.name) or not (target == root or target.startswith(root + os.sep)):
            raise ValueError(f"refusing archive member outside {dest}: {m.name!r}")
        if m.issym() or m.islnk():
            base = os.path.dirname(target) if m.issym() else root
            link = os.path.realpath(os.path.join(base, m.linkname))
            if os.path.isabs(m.linkname) or not link.startswith(root + os.sep):
                raise ValueError(f"refusing link out of {dest}: {m.name!r} -> {m.linkname!r}")
        if m.isdev():
            raise ValueError(f"refusing device node {m.name!r}")
        with contextlib.suppress(FileNotFoundError):
            mode = os.lstat(os.path.join(root, m.name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                # Writing over a FIFO would block until someone opens its other end.
                raise ValueError(f"refusing to extract over {m.name!r}, which is not a regular file")
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
    else:
        tar.extractall(dest)


def upload(req: dict, creds: Credentials) -> dict:
    dest, user = req["dest"], req.get("user")
    with creds.of(user), tarfile.open(fileobj=io.BytesIO(base64.b64decode(req["tar"]))) as tar:
        if user == "root" and os.path.realpath(dest) != os.path.normpath(dest):
            raise PermissionError(f"refusing to follow a symbolic link on the way to {dest}")
        os.makedirs(dest, exist_ok=True)
        names = tar.getnames()
        _extract_safely(tar, dest)
    return {"ok": True, "files": len(names)}


def download(req: dict, creds: Credentials) -> dict:
    path, user = req["path"], req.get("user")
    buf = io.BytesIO()
    with creds.of(user):
        if user == "root" and os.path.realpath(path) != os.path.normpath(path):
            raise PermissionError(f"refusing to follow a symbolic link on the way to {path}")
        if not os.path.lexists(path):
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(path, arcname=os.path.basename(path.rstrip("/")) or ".")
    return {"ok": True, "tar": base64.b64encode(buf.getvalue()).decode()}
