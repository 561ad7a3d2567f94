"""The toy suites (`arborl.tasks.suites` imports this module to register them)."""

from ..suites import Suite, register_suite

register_suite(
    Suite(
        "tool-mini",
        "arborl/Tool-v0",
        "arborl.tasks.toy.tool_mini:load_suite",
        description="120 templated tool-use problems: calculator, search over a small corpus, both",
        gold="arborl.tasks.toy.tool_mini:gold_policy",
        empty="arborl.tasks.toy.tool_mini:empty_policy",
        max_turns=6,
        tags=("tool",),
    )
)
register_suite(
    Suite(
        "tool-maze",
        "arborl/Tool-v0",
        "arborl.tasks.toy.tool_maze:load_suite",
        description="64 three-door mazes searched room by room: a wrong door costs a turn of a budget that tolerates one",
        gold="arborl.tasks.toy.tool_maze:gold_policy",
        empty="arborl.tasks.toy.tool_maze:empty_policy",
        max_turns=5,
        tags=("tool", "multi-turn"),
    )
)
register_suite(
    Suite(
        "tool-doors",
        "arborl/Tool-v0",
        "arborl.tasks.toy.tool_doors:load_suite",
        description="64 houses of three doors opened by colour (the question says which leads on): a wrong door costs a turn of a budget that tolerates one",
        gold="arborl.tasks.toy.tool_doors:gold_policy",
        empty="arborl.tasks.toy.tool_doors:empty_policy",
        max_turns=5,
        tags=("tool", "multi-turn"),
    )
)
register_suite(
    Suite(
        "tool-mix",
        "arborl/Tool-v0",
        "arborl.tasks.toy.tool_mix:load_suite",
        description="tool-mini's first 64 questions and 64 houses where blue doors lead on, unsaid, alternating",
        gold="arborl.tasks.toy.tool_mix:gold_policy",
        empty="arborl.tasks.toy.tool_mix:empty_policy",
        max_turns=6,
        tags=("tool", "multi-turn"),
    )
)
register_suite(
    Suite(
        "tool-mix-houses",
        "arborl/Tool-v0",
        "arborl.tasks.toy.tool_mix:load_houses",
        description="tool-mix's 64 houses alone (blue doors lead on, unsaid): the learning benchmark's suite",
        gold="arborl.tasks.toy.tool_doors:gold_policy",
        empty="arborl.tasks.toy.tool_doors:empty_policy",
        max_turns=5,
        tags=("tool", "multi-turn"),
    )
)
register_suite(
    Suite(
        "tool-cues",
        "arborl/Tool-v0",
        "arborl.tasks.toy.tool_cues:load_suite",
        description="64 houses of six rooms, three doors a room: a cue on each room's wall says which door opens, by one rule never stated; a locked door costs a turn of a budget that tolerates three",
        gold="arborl.tasks.toy.tool_cues:gold_policy",
        empty="arborl.tasks.toy.tool_cues:empty_policy",
        max_turns=10,
        tags=("tool", "multi-turn"),
    )
)
register_suite(
    Suite(
        "tool-cues-single",
        "arborl/Tool-v0",
        "arborl.tasks.toy.tool_cues:load_single",
        description="tool-cues' control: the blue door opens in every room whatever its cue (step credit has nothing to add)",
        gold="arborl.tasks.toy.tool_cues:gold_policy",
        empty="arborl.tasks.toy.tool_cues:empty_policy",
        max_turns=10,
        tags=("tool", "multi-turn"),
    )
)
register_suite(
    Suite(
        "tool-cues-image",
        "arborl/Tool-v0",
        "arborl.tasks.toy.tool_cues:load_suite",
        description="tool-cues for a vision-language policy: each room's cue is drawn in a picture and "
        "not named, so the door to open is in the pixels alone",
        gold="arborl.tasks.toy.tool_cues:gold_policy",
        empty="arborl.tasks.toy.tool_cues:empty_policy",
        max_turns=10,
        env_kwargs={"obs_type": "image", "pictures": "arborl.tasks.toy.tool_cues:cue_pictures"},
        tags=("tool", "multi-turn", "vision"),
    )
)
register_suite(
    Suite(
        "tool-cues-image-blank",
        "arborl/Tool-v0",
        "arborl.tasks.toy.tool_cues:load_suite",
        description="tool-cues-image's control: every picture is the bare wall, so nothing tells the "
        "doors apart (no policy beats the random walker)",
        gold="arborl.tasks.toy.tool_cues:gold_policy",
        empty="arborl.tasks.toy.tool_cues:empty_policy",
        max_turns=10,
        env_kwargs={"obs_type": "image", "pictures": "arborl.tasks.toy.tool_cues:blank_pictures"},
        tags=("tool", "multi-turn", "vision"),
    )
)
