"""SWE environments with third-party dependencies: the `pip` requirements are fetched as wheels
on the host (the package index is reachable from the host only) and unpacked into the
environment layer; the containers built from it stay offline."""

from __future__ import annotations

import pytest

from arborl.envs.code.instance_images import docker_builder
from arborl.sandboxes import DEFAULT_IMAGE
from arborl.tasks.swebench import SWEEnvironment, SWEInstance, environment_layer, to_code_task
from arborl.tasks.swebench.wheels import WheelFetchError, fetch_wheels

#: One pure-Python wheel and one compiled (cp311 manylinux) wheel.
REQUIREMENTS = ["more-itertools==10.5.0", "simplejson==3.19.3"]


def test_an_environment_with_wheels_needs_them_and_is_refused_on_the_portable_form():
    env = SWEEnvironment(repo="me/tool", pip=("attrs==23.2.0",))
    with pytest.raises(ValueError, match="need their wheels"):
        environment_layer(env, "me/tool", b"bundle")
    inst = SWEInstance.model_validate(
        {
            "instance_id": "me__tool-1",
            "repo": "me/tool",
            "base_commit": "0" * 40,
            "problem_statement": "p",
            "test_patch": "diff --git a/t.py b/t.py\n",
            "FAIL_TO_PASS": ["t"],
        }
    )
    task = to_code_task(inst, env, repo_files={"a.py": ""})
    assert "fetch_wheels" in task.setup[0] and task.setup[0].endswith("exit 1")
    with_wheels = to_code_task(
        inst, env, repo_files={"a.py": ""}, wheels={"attrs-23.2.0-py3-none-any.whl": b"PK"}
    )
    assert any(
        c.startswith("python3 .arborl-wheels/unpack.py") for c in with_wheels.setup
    ) and "exit 1" not in "".join(with_wheels.setup)


@pytest.mark.docker
def test_wheels_are_fetched_on_the_host_and_importable_offline(docker_backend, tmp_path):
    wheels = fetch_wheels(REQUIREMENTS, cache=tmp_path)
    assert any(n.startswith("more_itertools-10.5.0") for n in wheels)
    assert any(n.startswith("simplejson-3.19.3-cp311") and "manylinux" in n for n in wheels)
    assert fetch_wheels(REQUIREMENTS, cache=tmp_path) == wheels  # cached
    env = SWEEnvironment(repo="me/tool", pip=tuple(REQUIREMENTS), install=("python3 -c 'import simplejson'",))
    tag = docker_builder(docker_backend.client)(DEFAULT_IMAGE, environment_layer(env, "me/tool", b"", wheels))
    out = docker_backend.client.containers.run(
        tag,
        [
            "python3",
            "-c",
            "import more_itertools, simplejson, simplejson._speedups as s; "
            "print(more_itertools.first([7]), simplejson.dumps({'a': 1}), s.__file__.endswith('.so'))",
        ],
        network_mode="none",
        remove=True,
    )
    assert out.decode().split() == ["7", '{"a":', "1}", "True"]
    with pytest.raises(WheelFetchError, match="no-such-package-arborl"):
        fetch_wheels(["no-such-package-arborl==0.0.1"], cache=tmp_path)
