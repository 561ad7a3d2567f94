"""compose.yaml: a file Compose accepts, whose arborl commands are valid configs of ours.

Building the app image needs a package index and minutes; that is not done here. What is
checked: Compose itself parses the file (when a Compose is installed), every arborl command
a service runs composes into a valid config (so a renamed key breaks this test, not a user's
`docker-compose up`), the eval service's model path leads to the model the trainer service
saves (its checkpoint layout, `latest` pointer file included), and the app image copies every
package of the design card.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from arborl.cli.config import load_config, section

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())


def _arborl_commands() -> list[list[str]]:
    out = []
    for svc in COMPOSE["services"].values():
        cmd = svc.get("command")
        if isinstance(cmd, list) and cmd[:1] == ["sh"]:
            out += [c.split() for c in cmd[-1].split("&&")]
        elif isinstance(cmd, list):
            out.append(cmd)
    return [c for c in out if c and c[0] == "arborl"]


def test_services_cover_the_design_card():
    assert {"sandbox-image", "trainer", "eval", "inference"} <= set(COMPOSE["services"])
    assert "gpu" in COMPOSE["services"]["inference"]["profiles"]


@pytest.mark.parametrize("cmd", _arborl_commands(), ids=lambda c: " ".join(c[:3]))
def test_arborl_commands_compose_into_valid_configs(cmd):
    from arborl.cli.eval_cmds import _SHARED
    from arborl.eval.config import EvalConfig
    from arborl.trainer.local.config import TrainConfig

    sub, overrides = cmd[1], [a for a in cmd[2:] if "=" in a]
    if sub == "train":
        cfg = load_config(overrides, name="train")
        keys = [k for k in cfg if k not in ("sandbox", "pool", "image", "demo")]
        TrainConfig.model_validate({k: OmegaConf.to_container(cfg[k], resolve=True) for k in keys})
    elif sub == "eval":
        cfg = load_config(overrides, name="eval")
        values = OmegaConf.to_container(cfg, resolve=True)
        EvalConfig.model_validate({k: v for k, v in values.items() if k not in _SHARED})
    elif sub == "sandbox":
        cfg = load_config(overrides)
        assert section(cfg, "sandbox")["type"] == "docker"
    else:
        pytest.fail(f"compose.yaml runs `arborl {sub}`, which this test does not know")
    assert cfg["sandbox"]["type"] == "docker"  # sandboxes are sibling containers


def _command(sub: str) -> list[str]:
    (cmd,) = [c for c in _arborl_commands() if c[1] == sub]
    return cmd


def test_eval_service_loads_the_model_the_trainer_service_saves(tmp_path, monkeypatch, tiny_model):
    """Both services run in the app's working directory with ./runs mounted: a checkpoint saved
    the trainer's way under its run.dir must be what the eval's model.path loads."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from arborl.agents.engines.weights import resolve_model_dir
    from arborl.cli.eval_cmds import _SHARED
    from arborl.eval.config import EvalConfig
    from arborl.trainer.local.checkpoint import Checkpointer, RunState

    assert COMPOSE["services"]["eval"]["working_dir"] == COMPOSE["services"]["trainer"]["working_dir"]
    monkeypatch.chdir(tmp_path)
    (run_dir,) = [a.split("=", 1)[1] for a in _command("train") if a.startswith("run.dir=")]
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    Checkpointer(run_dir).save(model, AutoTokenizer.from_pretrained(tiny_model), {}, RunState(version=3))
    cfg = OmegaConf.to_container(
        load_config([a for a in _command("eval")[2:] if "=" in a], name="eval"), resolve=True
    )
    ecfg = EvalConfig.model_validate({k: v for k, v in cfg.items() if k not in _SHARED})
    path = resolve_model_dir(ecfg.model.path)  # what the eval's model driver loads
    assert AutoConfig.from_pretrained(path).model_type == model.config.model_type
    AutoTokenizer.from_pretrained(path)


def test_app_image_copies_every_package():
    dockerfile = (ROOT / "scripts" / "app.Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\S+) \1$", dockerfile, re.M))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dirs = {d.split("/")[0] for d in pyproject["tool"]["setuptools"]["package-dir"].values()}
    assert dirs <= copied, f"scripts/app.Dockerfile does not copy {sorted(dirs - copied)}"


def test_compose_accepts_the_file(tmp_path):
    for exe in (["docker-compose"], ["docker", "compose"]):
        if shutil.which(exe[0]) is None:
            continue
        probe = subprocess.run([*exe, "version"], capture_output=True, text=True)
        if probe.returncode != 0:
            continue
        res = subprocess.run(
            [*exe, "-f", str(ROOT / "compose.yaml"), "--profile", "eval", "--profile", "gpu", "config", "-q"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert res.returncode == 0, res.stderr
        return
    pytest.skip("no docker-compose / docker compose installed")


@pytest.mark.docker
async def test_sandboxes_mount_only_what_the_app_containers_share_with_the_host(docker_backend):
    """The app services start sandboxes as sibling containers: every host path a sandbox
    mounts must be one the app container shares at the same path (the package's own files,
    e.g. the sandbox server, exist only inside the app container)."""
    shared = {
        v.split(":")[0]
        for v in COMPOSE["x-app"]["volumes"]
        if v.startswith("/") and v.split(":")[0] == v.split(":")[1]
    }
    run_dir = str(docker_backend.runtime_dir)
    assert run_dir in shared, f"compose.yaml does not share the Docker backend's {run_dir}"
    from arborl.sandboxes import SandboxSpec

    async with await docker_backend.create(SandboxSpec()) as sb:
        binds = [m["Source"] for m in sb.handle.attrs["Mounts"] if m["Type"] == "bind"]
        assert any("server-" in b for b in binds) and any("arborl-drop" in b for b in binds), binds
        for source in binds:
            assert source.startswith(run_dir + "/"), f"{source} exists only where the harness runs"
