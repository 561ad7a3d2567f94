"""Typed errors raised by `arborl.kernels` for bad input or a missing backend.

Every message names the offending argument and what it should be, so the caller can fix
the call without reading the kernel.
"""

from __future__ import annotations


class KernelInputError(ValueError):
    """An argument to a kernel has the wrong shape, dtype, device or value."""


class ShapeMismatchError(KernelInputError):
    """Two arguments disagree on a dimension (e.g. ``hidden[..., d]`` vs ``weight[V, d]``)."""


class DTypeMismatchError(KernelInputError, TypeError):
    """An argument has a dtype the kernel does not accept (or disagrees with another's)."""


class DeviceMismatchError(KernelInputError):
    """Arguments live on different devices."""


class BackendUnavailableError(RuntimeError):
    """The requested backend cannot run here (e.g. ``backend="triton"`` without CUDA or
    ``TRITON_INTERPRET=1``, or without the ``triton`` package)."""
