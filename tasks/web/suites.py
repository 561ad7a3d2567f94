"""The web suites (`arborl.tasks.suites` imports this module to register them)."""

from ..suites import Suite, register_suite

register_suite(
    Suite(
        "web-mini",
        "arborl/Web-v0",
        "arborl.tasks.web.task:load_web_mini",
        description="11 web tasks on self-hosted sites: a shop (search, filters, cart, checkout), an admin console, both",
        gold="arborl.tasks.web.task:gold_policy",
        empty="arborl.tasks.web.task:empty_policy",
        max_turns=30,
        tags=("web",),
    )
)
register_suite(
    Suite(
        "web-miniwob",
        "arborl/MiniWoB-v0",
        "arborl.tasks.web.miniwob:load_web_miniwob",
        description="MiniWoB++ tasks with a scripted solution (2 seeds each), scored by their own JavaScript",
        gold="arborl.tasks.web.miniwob:gold_policy",
        empty="arborl.tasks.web.miniwob:empty_policy",
        max_turns=8,
        tags=("web", "miniwob"),
    )
)
#: No scripted solution (run with a model): not in the gold/empty suite validation.
register_suite(
    Suite(
        "web-miniwob-all",
        "arborl/MiniWoB-v0",
        "arborl.tasks.web.miniwob:load_web_miniwob_all",
        description="every MiniWoB++ task arborl's actions can express (docs/web.md lists the rest)",
        empty="arborl.tasks.web.miniwob:empty_policy",
        max_turns=15,
        tags=("web", "miniwob"),
    )
)
