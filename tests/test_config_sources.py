"""One source for every config (issue 51 §3): each Hydra section the CLI composes is generated
from its typed model, so no hand copy can drift from it, and an unknown key anywhere is an
error that names the key and the keys its section has."""

from __future__ import annotations

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from arborl.cli.config import CONF_DIR, ConfigError, load_config, section, sections
from arborl.cli.eval_cmds import compose_eval
from arborl.cli.train_cmds import compose_train
from arborl.eval.config import EvalConfig
from arborl.sandboxes import PoolConfig, backend_names
from arborl.sandboxes.factory import backend_config_class, config_trees
from arborl.sandboxes.images import BaseImageRecipe


def test_the_eval_config_is_exactly_evalconfigs_keys_and_defaults():
    cfg, ecfg = compose_eval([])
    assert sections(cfg) == EvalConfig().model_dump(mode="json")
    assert ecfg == EvalConfig()
    written = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "eval.yaml"))
    assert set(written) == {"defaults"}, "eval.yaml writes keys of EvalConfig by hand"
    _, changed = compose_eval(["model.temperature=0.5", "swe.images=off", "limit=3"])
    assert (changed.model.temperature, changed.swe.images, changed.limit) == (0.5, "off", 3)


@pytest.mark.parametrize("name", ["config", "eval", "train"])
def test_the_pool_every_command_uses_is_poolconfigs_default(name):
    assert section(load_config([], name=name), "pool") == PoolConfig().model_dump(mode="json")


def test_each_sandbox_option_and_the_base_image_are_their_models_defaults():
    assert not (CONF_DIR / "sandbox").exists(), "a hand-written sandbox option is back in cli/conf"
    assert set(config_trees()) == set(backend_names()) >= {"auto", "docker", "bwrap", "ray"}
    for name in backend_names():
        sandbox = section(load_config([f"sandbox={name}"]), "sandbox")
        assert sandbox == config_trees()[name]
        backend_config_class(name).model_validate(sandbox)  # and it validates as is
    assert section(load_config([]), "image") == BaseImageRecipe().model_dump(mode="json")
    gui = BaseImageRecipe(**section(load_config(["image=gui"]), "image"))
    assert gui.repository == "arborl/gui" and gui.packages == BaseImageRecipe().packages


def test_verls_arborl_section_is_arborlsections_keys_and_defaults():
    pytest.importorskip("verl")
    from arborl.cli.train_cmds import compose_verl
    from arborl.trainer.verl.config import ArborlSection

    cfg, arborl = compose_verl([])
    assert section(cfg, "arborl") == ArborlSection().model_dump(mode="json") and arborl == ArborlSection()
    _, arborl = compose_verl(["arborl.max_turns=3", "arborl.tree={roots:2}", "arborl.pool.max_size=2"])
    assert (arborl.max_turns, arborl.tree.roots, arborl.pool.max_size) == (3, 2, 2)
    assert "env_id" not in OmegaConf.load(CONF_DIR.parents[1] / "trainer/verl/arborl_ppo.yaml").get(
        "arborl", {}
    )


def _compose(command: str, overrides: list[str]) -> object:
    """What each command composes and validates before it runs anything."""
    if command == "eval":
        return compose_eval(overrides)
    if command == "train":
        return compose_train(overrides)
    if command == "verl-train":
        pytest.importorskip("verl")
        from arborl.cli.train_cmds import compose_verl

        return compose_verl(overrides)
    return load_config(overrides)


@pytest.mark.parametrize(
    ("command", "choice", "key", "a_known_key"),
    [
        ("config", [], "pool.nope", "max_size"),
        ("config", [], "demo.nope", "episodes"),
        ("config", [], "image.nope", "packages"),
        ("config", [], "sandbox.nope", "docker"),  # auto
        ("config", ["sandbox=docker"], "sandbox.nope", "api_threads"),
        ("config", ["sandbox=bwrap"], "sandbox.nope", "agent_uid"),
        ("config", ["sandbox=ray"], "sandbox.nope", "node_resource"),
        ("config", ["sandbox=auto"], "sandbox.bwrap.nope", "runtime_dir"),
        ("eval", [], "nope", "suite"),
        ("eval", [], "model.nope", "max_new_tokens"),
        ("eval", [], "swe.nope", "repos_dir"),
        ("train", [], "nope", "learner"),
        ("train", [], "learner.nope", "lr"),
        ("train", [], "rollout.nope", "group_size"),
        ("verl-train", [], "arborl.nope", "env_id"),
        ("verl-train", [], "arborl.pool.nope", "max_size"),
    ],
)
def test_an_unknown_key_is_an_error_naming_it_and_the_known_ones(command, choice, key, a_known_key):
    # as an override of a key the tree lacks (Hydra refuses it), and added with + (the model refuses it)
    for override in (f"{key}=1", f"+{key}=1"):
        with pytest.raises(ConfigError) as error:
            _compose(command, [*choice, override])
        message = str(error.value)
        assert f"unknown key {key!r}" in message and a_known_key in message, message


def test_the_command_line_says_which_key_is_unknown():
    res = subprocess.run(
        [sys.executable, "-m", "arborl.cli.main", "train", "+learner.nope=1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2 and "unknown key 'learner.nope'" in res.stderr and "lr" in res.stderr, (
        res.stderr
    )
    assert "Traceback" not in res.stderr
