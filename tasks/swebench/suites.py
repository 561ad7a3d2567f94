"""The SWE-bench suites (`arborl.tasks.suites` imports this module to register them)."""

from ..suites import Suite, register_suite

register_suite(
    Suite(
        "swe-mini",
        "arborl/Code-v0",
        "arborl.tasks.swebench.mini:load_tasks",
        description="12 SWE-bench instances over 4 small Python repositories (FAIL_TO_PASS/PASS_TO_PASS)",
        gold="arborl.tasks.swebench.policies:gold_policy",
        empty="arborl.tasks.swebench.policies:empty_policy",
        max_turns=20,
        tags=("code", "swe-bench"),
    )
)
register_suite(
    Suite(
        "swe-real",
        "arborl/Code-v0",
        "arborl.tasks.swebench.real:load_tasks",
        description="SWE-bench instances cut from real repositories' history (src layouts, unittest, wheels)",
        gold="arborl.tasks.swebench.policies:gold_policy",
        empty="arborl.tasks.swebench.policies:empty_policy",
        max_turns=20,
        tags=("code", "swe-bench", "real"),
    )
)
