"""`arborl` command line.

Subcommands take Hydra overrides after their own flags, e.g.
`arborl demo sandbox=bwrap demo.episodes=8`. `arborl config` prints the composed config.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

from omegaconf import OmegaConf

from .config import ConfigError, load_config

EPILOG = """\
configuration (Hydra): append overrides to any command
  sandbox={backends}
                              where sandboxes run (auto: Docker if an engine and the
                              base image exist, else bubblewrap; `arborl sandbox backends`)
  pool.max_size=8             most sandboxes alive at once
  image.packages=[python3,git]  base image recipe
  `arborl config [overrides]` prints the result.

examples:
  arborl sandbox build            build the offline base image (cached by recipe hash)
  arborl sandbox ls               list every sandbox arborl made on this host
  arborl sandbox gc --all         remove them all (default: only orphans)
  arborl sandbox backends         the registered sandbox backends; `arborl engines`: the engines
  arborl envs list --describe      the registered environments (gymnasium.make ids)
  arborl demo sandbox=bwrap       scripted SWE-style episodes over a warm pool
  arborl train                    the main job: tiny model, tool-mini, warm start + async GRPO
  arborl train async.mode=sync learner.lr=3e-4 run.dir=runs/sync
  arborl report runs/train        learning curves (PNG + HTML)
  arborl eval --list              the registered task suites
  arborl eval suite=swe-mini agent=gold      validate a suite (gold 100 %, empty 0 %)
  arborl eval suite=tool-mini agent=model model.path=runs/train   (its latest checkpoint)
  arborl eval-report runs/eval/tool-mini-model runs/eval/tool-mini-gold   compare two runs
  arborl view runs/eval/tool-mini-gold       episodes as one HTML page (a run dir too; --serve)
  arborl gateway --model PATH --admin-token-file token   OpenAI API for your own agent harness
"""


def _cmd_config(args: argparse.Namespace) -> int:
    print(OmegaConf.to_yaml(load_config(args.overrides)))
    return 0


def _epilog() -> str:
    """The help's epilog, with the backends registered now (a plug-in's too)."""
    from arborl.sandboxes import backend_names

    return EPILOG.replace("{backends}", "|".join(backend_names()))


def _parser() -> argparse.ArgumentParser:
    from . import demo, engines_cmds, envs_cmds, eval_cmds, gateway_cmds, sandbox_cmds, train_cmds, view_cmds

    epilog = _epilog()
    p = argparse.ArgumentParser(
        prog="arborl",
        description="arborl: agentic multi-turn environment gym and RL harness for LLM agents.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help_: str, fn: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        sp = sub.add_parser(
            name,
            help=help_,
            description=help_,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sp.set_defaults(fn=fn)
        return sp

    sp = add("config", "print the composed configuration", _cmd_config)
    sp.add_argument("overrides", nargs="*", help="Hydra overrides (key=value)")
    sandbox_cmds.register(sub, add)
    envs_cmds.register(sub)
    demo.register(add)
    train_cmds.register(add)
    eval_cmds.register(add)
    gateway_cmds.register(add)
    engines_cmds.register(add)
    view_cmds.register(add)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    if not getattr(args, "fn", None):
        parser.print_help()
        return 2
    try:
        return int(args.fn(args))
    except ConfigError as e:  # a wrong key or value: say which, no traceback
        print(f"arborl {args.command}: invalid config: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
