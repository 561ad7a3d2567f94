"""A seccomp filter for the bubblewrap backend, denying what Docker's default profile denies.

Docker puts every container under its default seccomp profile; bubblewrap applies none unless
given one. Without it an agent in a local sandbox could use the kernel keyring, which is keyed
by uid and not by namespace (a key written in one sandbox was read in another), or make itself
root in a user namespace of its own (`unshare -Ur`), which opens kernel code meant for root to
it. The filter returns EPERM for the same families of calls Docker's profile refuses to a
container without CAP_SYS_ADMIN: keyrings, namespaces, mounts, kernel modules, clocks, BPF,
perf, userfaultfd, io_uring (its requests bypass this very filter), handle-based opens and
reboots. `clone` is refused only with a namespace flag; `clone3`, whose flags seccomp cannot
read, answers ENOSYS so the C library falls back to `clone`, as under Docker.

The program is built with libseccomp (through `pyseccomp`, a ctypes binding of it) rather than
written by hand: libseccomp knows each architecture's syscall numbers and its x32 pitfalls.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile

DENIED = (
    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module", "delete_module",
    "finit_module", "fsconfig", "fsmount", "fsopen", "fspick", "get_kernel_syms", "init_module",
    "io_uring_enter", "io_uring_register", "io_uring_setup", "ioperm", "iopl", "kcmp",
    "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie", "mount", "mount_setattr",
    "move_mount", "name_to_handle_at", "nfsservctl", "open_by_handle_at", "open_tree",
    "perf_event_open", "pivot_root", "quotactl", "quotactl_fd", "reboot", "request_key", "setns",
    "settimeofday", "swapoff", "swapon", "sysfs", "_sysctl", "umount", "umount2", "unshare",
    "uselib", "userfaultfd", "ustat", "vm86", "vm86old",
)  # fmt: skip
#: clone(2) flags that make a new namespace (CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC,
#: NEWUSER, NEWPID, NEWNET).
NAMESPACE_FLAGS = (0x80, 0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)


class SeccompUnavailable(RuntimeError):
    """libseccomp (or its Python binding) is missing on this host."""


@functools.cache
def filter_program() -> bytes:
    """The compiled BPF program (what `bwrap --seccomp FD` reads)."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as e:  # OSError: the binding found no libseccomp.so
        raise SeccompUnavailable(
            f"cannot build the local sandbox's seccomp filter ({e}): install libseccomp2 and pyseccomp"
        ) from e
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    for name in DENIED:
        try:
            f.add_rule(sc.ERRNO(errno.EPERM), name)
        except (RuntimeError, ValueError, OSError):
            continue  # not a syscall of this architecture
    for flag in NAMESPACE_FLAGS:
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as tmp:
        f.export_bpf(tmp)
        tmp.seek(0)
        return tmp.read()


def program_fd() -> int:
    """A readable descriptor holding the program, for a child to inherit; the caller closes it."""
    fd = os.memfd_create("arborl-seccomp")
    os.write(fd, filter_program())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
