"""Known repositories' environments (SWE-bench's per-repo "specs"): test command, log parser.

`environment_for(instance)` looks an instance's (repo, version) up in the environments a suite
ships first, then here, then falls back to pytest. Extend the registry from a module given to
`arborl eval --import my_specs` (or any code that runs before the suite loads):

    from arborl.tasks.swebench import SWEEnvironment, register_environment
    register_environment(SWEEnvironment(repo="me/tool", version="2.0",
                                        install=("pip install --no-index /opt/wheels/*.whl",),
                                        test_cmd="python3 -m pytest -rA", log_parser="pytest"))

or write the same objects as a JSON list and pass it as `swe.environments=FILE`.

The entries below give how a repository's tests are run and read (what SWE-bench's
`MAP_REPO_VERSION_TO_SPECS` gives as `test_cmd` and its `MAP_REPO_TO_PARSER`), not its
dependencies: the sandboxes are offline, so an environment that needs packages the base image
lacks must ship them (`files`, `install`) or run on an image that has them.
"""

from __future__ import annotations

from .instance import SWEEnvironment

#: The registry; `register_environment` adds to it. Looked up after a suite's own environments.
ENVIRONMENTS: list[SWEEnvironment] = [
    SWEEnvironment(
        repo="django/django",
        # runtests.py imports the checkout's django; SWE-bench installs it with `pip install -e .`.
        test_cmd="PYTHONPATH=$PWD python3 tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
        agent_test_cmd="PYTHONPATH=$PWD python3 tests/runtests.py --settings=test_sqlite --parallel 1",
        log_parser="django",
        test_directives="django",
    ),
    SWEEnvironment(
        repo="sympy/sympy",
        test_cmd="PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' python3 bin/test -C --verbose",
        agent_test_cmd="python3 bin/test -C",
        log_parser="sympy",
    ),
]


def register_environment(environment: SWEEnvironment, *, replace: bool = True) -> SWEEnvironment:
    """Add an environment for (repo, version); an existing entry for the same key is replaced
    (or, with `replace=False`, kept and a ValueError raised)."""
    key = (environment.repo, environment.version)
    for i, env in enumerate(ENVIRONMENTS):
        if (env.repo, env.version) == key:
            if not replace:
                raise ValueError(f"an environment for {key} is already registered")
            ENVIRONMENTS[i] = environment
            return environment
    ENVIRONMENTS.append(environment)
    return environment
