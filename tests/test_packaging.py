"""The install: one `arborl` namespace over the design-card folders, nothing at the top."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["envs", "agents", "trainer", "sandboxes", "kernels", "tasks", "eval"]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.mark.parametrize("layer", LAYERS)
def test_layers_import_under_arborl(layer):
    mod = importlib.import_module(f"arborl.{layer}")
    assert Path(mod.__file__).resolve().parent == ROOT / layer
    assert (ROOT / layer / "py.typed").exists()


def test_every_subpackage_is_listed_for_the_wheel():
    cfg = _pyproject()["tool"]["setuptools"]
    mapping = {v: k for k, v in cfg["package-dir"].items()}
    listed = set(cfg["packages"])
    for top, name in mapping.items():
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            dotted = ".".join([name, *rel.parts]) if rel.parts else name
            assert dotted in listed, f"{dotted} ({init.parent}) is missing from pyproject packages"


@pytest.mark.slow
def test_wheel_holds_only_the_arborl_namespace(tmp_path):
    """Build the real wheel: nothing named envs/kernels/... may land at the top of site-packages."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("arborl-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        tops = {name.split("/")[0] for name in zf.namelist()}
        names = zf.namelist()
    assert tops == {"arborl", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    for layer in [*LAYERS, "cli"]:
        assert f"arborl/{layer}/__init__.py" in names
        assert f"arborl/{layer}/py.typed" in names
    data_files = (
        "sandboxes/server/main.py",
        "sandboxes/server/wire.py",
        "sandboxes/drop_ids.c",
        "cli/conf/config.yaml",
        "cli/conf/eval.yaml",
        "cli/conf/train.yaml",
    )
    for data in (
        *data_files,
        "cli/conf/image/gui.yaml",
        "trainer/local/main_job.yaml",
        "trainer/verl/arborl_ppo.yaml",
        "trainer/verl/agent_loops.yaml",
        "trainer/verl/platform/cpu.yaml",
        "eval/viewer/page.html",  # `arborl view`'s template
        # each benchmark folder's data, beside its loader
        "tasks/toy/data/tool-mini/corpus.jsonl",
        "tasks/osworld/data/desktop-mini/gold.json",
        "tasks/web/data/web-mini/shop-buy-mouse.json",
        "tasks/swebench/mini/data/instances.jsonl",
        "tasks/swebench/mini/data/repos/arborl-mini__strkit.bundle",
        "tasks/swebench/real/data/environments.json",
        "tasks/swebench/real/data/repos/hukkin__tomli.bundle",
    ):
        assert f"arborl/{data}" in names
    assert "arborl/__init__.py" not in names  # a namespace: other arborl-* wheels can extend it


def test_torch_stays_at_the_local_cpu_build():
    import torch

    assert torch.__version__.startswith("2.13.0")
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text()
