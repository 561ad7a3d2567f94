"""A Harbor task's `environment/Dockerfile`, mapped onto arborl's offline base image.

    plan = map_dockerfile(text)           # pure: no Docker here (envs/harbor/images.py builds it)
    plan.family                           # "python" or "debian": which offline base it starts from
    plan.steps                            # the Dockerfile's own instructions, each with its line
    plan.problems                         # (line, why) of what cannot be built offline

No image can be pulled on this kind of machine, so the `FROM` line is not kept: an image of a
family arborl can stand in for (Debian, Ubuntu, Python, and Terminal-Bench's `python-3-13` /
`ubuntu-24-04` bases, which are those) is replaced by arborl's own Debian base, with pip and
`python` added for the Python family. Every other instruction is kept as written, so `RUN
apt-get install` and `pip install` reach the package registries this machine reaches, and a
step that needs anything else fails when the image is built, naming its line. What cannot work
offline at all is found here, before any build: another base image, a multi-stage build, an
`ADD` of a URL. `CMD`, `ENTRYPOINT`, `HEALTHCHECK`, `VOLUME` and `STOPSIGNAL` are dropped: the
sandbox runs its own server as the container's process, and the tests start what they need.

Parsing is `dockerfile-parse`'s (continuation lines, comments, JSON and shell forms).
"""

from __future__ import annotations

import io
import posixpath
import re
from dataclasses import dataclass, field

from dockerfile_parse import DockerfileParser

#: Image names (the last part of the repository, tag left off) arborl's base stands in for.
FAMILIES = {"python": "python", "debian": "debian", "ubuntu": "debian", "buildpack-deps": "debian"}
#: Instructions that only matter to a container Harbor would start: the sandbox starts its own.
DROPPED = frozenset({"CMD", "ENTRYPOINT", "HEALTHCHECK", "VOLUME", "STOPSIGNAL", "COMMENT"})
#: Where the agent may not work: it is given its working directory, recursively.
SYSTEM_DIRS = frozenset(
    {
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/lib",
        "/lib64",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/sys",
        "/tmp",
    }
    | {"/usr", "/usr/bin", "/usr/lib", "/usr/local", "/usr/local/bin", "/usr/sbin", "/var", "/logs", "/tests"}
)
#: Harbor runs commands in the image's WORKDIR; Terminal-Bench's images all set this one.
DEFAULT_WORKDIR = "/app"
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass(frozen=True)
class Step:
    """One kept instruction and the line it starts on (1-based)."""

    line: int
    text: str


@dataclass
class DockerfilePlan:
    """What `map_dockerfile` found."""

    family: str = "debian"
    base: str = ""
    """The `FROM` image as written (after `ARG` substitution)."""
    steps: list[Step] = field(default_factory=list)
    workdir: str = DEFAULT_WORKDIR
    problems: list[tuple[int, str]] = field(default_factory=list)

    def problem_text(self, file: str = "environment/Dockerfile") -> str:
        return "; ".join(f"{file}:{line}: {why}" if line else f"{file}: {why}" for line, why in self.problems)


def substitute(text: str, values: dict[str, str]) -> str:
    """`$X`, `${X}` and `${X:-default}` as Docker expands them (unknown names: empty)."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        if name in values:
            return values[name]
        return m.group(2) or ""

    return _VAR.sub(one, text)


def image_family(image: str) -> str | None:
    """`python` / `debian` for an image arborl's base can stand in for, else None."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    repo = last.split(":", 1)[0].lower()
    for prefix, family in FAMILIES.items():
        if repo == prefix or repo.startswith(prefix + "-"):
            return family
    return None


def _from_image(value: str) -> str:
    words = [w for w in value.split() if not w.startswith("--")]
    return words[0] if words else ""


def _arg_default(value: str) -> tuple[str, str | None]:
    name, eq, default = value.partition("=")
    return name.strip(), (default.strip().strip("\"'") if eq else None)


def map_dockerfile(text: str, workdir_override: str | None = None) -> DockerfilePlan:
    """The plan for building `text` offline (see the module doc); never raises for content."""
    plan = DockerfilePlan()
    parser = DockerfileParser(fileobj=io.BytesIO(text.encode()))
    args: dict[str, str] = {}
    env: dict[str, str] = {}
    froms = 0
    workdir = "/"
    for item in parser.structure:
        kind, line, value = item["instruction"].upper(), item["startline"] + 1, item["value"]
        if kind == "FROM":
            froms += 1
            if froms > 1:
                plan.problems.append(
                    (line, "a multi-stage build (a second FROM) is not mapped onto the offline base")
                )
                continue
            plan.base = substitute(_from_image(value), args)
            family = image_family(plan.base)
            if family is None:
                plan.problems.append(
                    (
                        line,
                        f"FROM {plan.base}: no image can be pulled here, and arborl's offline base "
                        "stands in only for debian, ubuntu and python images",
                    )
                )
            else:
                plan.family = family
            continue
        if froms == 0:
            if kind == "ARG":  # an ARG before FROM only parameterises FROM
                name, default = _arg_default(value)
                if default is not None:
                    args[name] = default
            elif kind != "COMMENT":
                plan.problems.append((line, f"{kind} before FROM"))
            continue
        if kind in DROPPED:
            continue
        if kind == "ADD" and re.search(r"(^|\s)(https?|ftp|git)(://|@)", value):
            plan.problems.append((line, "ADD of a URL needs the open internet, which the build cannot reach"))
            continue
        if kind in ("COPY", "ADD") and re.search(r"(^|\s)--from[= ]", value):
            plan.problems.append((line, f"{kind} --from needs another build stage or a pulled image"))
            continue
        if kind == "ARG":
            name, default = _arg_default(value)
            if default is not None:
                args[name] = default
        elif kind == "ENV":
            env.update(_env_pairs(value))
        elif kind == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, substitute(value.strip(), {**args, **env})))
        plan.steps.append(Step(line, item["content"].rstrip("\n")))
    if froms == 0:
        plan.problems.append((1, "no FROM line"))
    chosen = workdir_override or (workdir if workdir != "/" else DEFAULT_WORKDIR)
    plan.workdir = posixpath.normpath(chosen)
    if plan.workdir in SYSTEM_DIRS:
        plan.problems.append(
            (
                0,
                f"the working directory {plan.workdir} is a system directory; the agent is given its "
                "working directory, so set a WORKDIR of the task's own (e.g. /app)",
            )
        )
    return plan


def _env_pairs(value: str) -> dict[str, str]:
    """`ENV A=b C="d e"` or the old `ENV A b c` form."""
    import shlex

    try:
        words = shlex.split(value)
    except ValueError:
        return {}
    if words and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    return dict(w.split("=", 1) for w in words if "=" in w)
