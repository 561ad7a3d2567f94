"""arborl's own small tool-use suites, made to be learned by small models in minutes.

tool_mini.py    tool-mini: arithmetic and look-ups over a synthetic knowledge base
calculator.py   its host tool
tool_maze.py    tool-maze: rooms searched by name
tool_doors.py   tool-doors: houses of doors opened by colour (a host tool with state)
tool_mix.py     tool-mix and tool-mix-houses: the two together, the main job's suite
tool_cues.py    tool-cues and tool-cues-single: rooms whose painted cue says which of three doors opens,
                by a rule nothing states (step credit should pay here; the single-rule control)
suites.py       their registration
"""
