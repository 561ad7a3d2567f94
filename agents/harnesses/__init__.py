"""Other people's agent harnesses, run unchanged against the gateway (`arborl.agents.gateway`).

`mini_swe_agent.py`: mini-swe-agent on a SWE task, its commands in an arborl sandbox, its
repository graded by arborl's SWE grading. See docs/gateway.md.
"""
