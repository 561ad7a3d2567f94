"""The OSWorld suites (`arborl.tasks.suites` imports this module to register them)."""

from ..suites import Suite, register_suite

register_suite(
    Suite(
        "desktop-mini",
        "arborl/Desktop-v0",
        "arborl.tasks.osworld.mini:load_desktop_mini",
        description="9 OSWorld-format desktop tasks: text editor, file manager, terminal, spreadsheet, infeasible",
        gold="arborl.tasks.osworld.mini:desktop_mini_gold",
        empty="arborl.tasks.osworld.policies:empty_policy",
        max_turns=15,
        tags=("desktop", "osworld"),
    )
)
