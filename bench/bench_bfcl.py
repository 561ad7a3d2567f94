"""BFCL benchmark: `arborl/BFCL-v0` steps per second against bfcl-eval's own code doing the
same work, measured in the same run (the machine is shared and noisy: read the ratios).

- single-turn (simple, multiple, parallel, parallel_multiple): arborl is reset + one step
  of the gold reply (arborl's parser, bfcl-eval's `ast_checker`); the baseline is bfcl-eval's
  runner scoring the same calls (`_evaluate_single_ast_entry`: FC decode + `ast_checker`).
- multi-turn (base, miss_func, miss_param, long_context): arborl is the gold episode (each
  step parsed and run on the episode's backends, the run scored at its end); the baseline is
  bfcl-eval's own inference-side executor (`execute_multi_turn_func_call`) on the same steps
  plus its `multi_turn_checker` at the end. Steps are the model's replies.

Writes bench/results/bfcl.md.

    python bench/bench_bfcl.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import gymnasium

import arborl.envs  # noqa: F401
from arborl.envs.episodes import run_episode
from arborl.envs.event_loop import get_env_loop
from arborl.tasks import get_suite
from arborl.tasks.bfcl.data import AST_CATEGORIES, MULTI_TURN_CATEGORIES, load_category
from arborl.tasks.bfcl.official import bfcl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tasks" / "bfcl"))
from bfcl_parity import _fc_result, _gold_turns

RESULTS = Path(__file__).with_name("results")


def arborl_steps(tasks: list, env: gymnasium.Env) -> tuple[int, float]:
    suite = get_suite("bfcl-simple")
    policies = [suite.gold_policy(t) for t in tasks]  # made before the clock starts
    steps, start = 0, time.perf_counter()
    for task, policy in zip(tasks, policies, strict=True):
        ep = get_env_loop().run(run_episode(env, policy, task, max_turns=400))
        assert sum(ep.rewards) == 1.0, (task.id, ep.infos[-1])
        steps += len(ep.rewards)
    return steps, time.perf_counter() - start


def official_single(tasks: list) -> tuple[int, float]:
    import copy

    from bfcl_eval.constants.enums import Language, ReturnFormat
    from bfcl_eval.eval_checker import eval_runner
    from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler

    from arborl.tasks.bfcl.official import MODEL_NAME
    from arborl.tasks.bfcl.policies import gold_calls

    handler = OpenAICompletionsHandler(MODEL_NAME, 0, MODEL_NAME, True)
    items = [(t, _fc_result(gold_calls(t), ""), copy.deepcopy(t.entry)) for t in tasks]
    start = time.perf_counter()
    for task, result, entry in items:
        verdict = eval_runner._evaluate_single_ast_entry(
            handler,
            task.id,
            result,
            task.ground_truth,
            entry,
            MODEL_NAME,
            task.category,
            Language.PYTHON,
            ReturnFormat.PYTHON,
        )
        assert verdict["valid"], verdict
    return len(items), time.perf_counter() - start


def official_multi(tasks: list) -> tuple[int, float]:
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    runs = [(t, _gold_turns(t)) for t in tasks]
    steps, start = 0, time.perf_counter()
    for n, (task, turns) in enumerate(runs):
        model = f"bench_{n}"
        for steps_of_turn in turns:
            for calls in steps_of_turn:
                multi_turn_utils.execute_multi_turn_func_call(
                    _fc_decoded(calls),
                    task.entry["initial_config"],
                    task.entry["involved_classes"],
                    model,
                    task.id,
                )
            steps += len(steps_of_turn) + 1  # the reply that ends the turn
        decoded = [[_fc_decoded(c) for c in s] for s in turns]
        assert multi_turn_checker(decoded, task.ground_truth, task.entry, task.category, model)["valid"]
        for name in [g for g in vars(multi_turn_utils) if g.startswith(model)]:
            delattr(multi_turn_utils, name)
    return steps, time.perf_counter() - start


def _fc_decoded(calls: list) -> list[str]:
    from bfcl_eval.model_handler.utils import convert_to_function_call

    return convert_to_function_call(_fc_result(calls, ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="5 entries per category instead of 40")
    n = 5 if ap.parse_args().quick else 40
    os.environ.setdefault("OPENAI_API_KEY", "unused: nothing is sent")
    bfcl()  # bfcl-eval's checker, with arborl's model entry
    env = gymnasium.make("arborl/BFCL-v0")
    single = [t for c in AST_CATEGORIES[:4] for t in load_category(c, n)]
    multi = [t for c in MULTI_TURN_CATEGORIES for t in load_category(c, n)]
    rows = []
    for name, tasks, baseline in (
        ("single-turn", single, official_single),
        ("multi-turn", multi, official_multi),
    ):
        arborl_steps(tasks[:2], env)  # warm imports and caches
        baseline(tasks[:2])
        a_steps, a_s = arborl_steps(tasks, env)
        b_steps, b_s = baseline(tasks)
        rows.append((name, len(tasks), a_steps / a_s, b_steps / b_s))
        print(rows[-1], flush=True)
    lines = [
        "# BFCL: arborl/BFCL-v0 steps/s vs bfcl-eval's own code on the same work",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"{n} entries per category{' (--quick)' if n == 5 else ''}. Written by bench/bench_bfcl.py.",
        "",
        "| work | entries | arborl steps/s | bfcl-eval steps/s | ratio |",
        "|---|---:|---:|---:|---:|",
        *(f"| {r[0]} | {r[1]} | {r[2]:.0f} | {r[3]:.0f} | {r[2] / r[3]:.2f} |" for r in rows),
        "",
        "arborl's single-turn step includes a reset, parsing the reply and the chat bookkeeping; "
        "the baseline only decodes and checks. Multi-turn, arborl also grades by re-running the calls on fresh "
        "backends (as bfcl-eval's checker does), after running them in the episode.",
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bfcl.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
