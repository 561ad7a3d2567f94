"""The three example verifiers environments as arborl suites, with scripted policies to
validate them (`arborl eval --import arborl_vf_suites suite=vf_guess agent=gold`)."""

import json
import re

from arborl.envs.prime_verifiers import register_verifiers_environment


def numbers(text):
    return [int(n) for n in re.findall(r"\d+", text)]


def capital_gold(task):
    return lambda messages, info: task.row["answer"]


def guess_gold(task):
    """Bisect 1..100 on the env's Higher / Lower."""

    def policy(messages, info):
        low, high, guess = 1, 100, None
        for m in messages:
            if m["role"] == "assistant":
                guess = numbers(m["content"])[-1]
            elif guess is not None and m["content"] == "Higher.":
                low = guess + 1
            elif guess is not None and m["content"] == "Lower.":
                high = guess - 1
        return str((low + high) // 2)

    return policy


def add_gold(task):
    """Call the tool (hermes format) on the question's numbers, then reply with its result."""

    def policy(messages, info):
        if messages[-1]["role"] == "tool":
            return messages[-1]["content"]
        a, b = numbers(messages[-1]["content"])[:2]
        return f"<tool_call>{json.dumps({'name': 'add', 'arguments': {'a': a, 'b': b}})}</tool_call>"

    return policy


def giving_up(task):
    return lambda messages, info: "I give up."


register_verifiers_environment("vf_capitals", gold=capital_gold, empty=giving_up, max_turns=1)
register_verifiers_environment("vf_guess", gold=guess_gold, empty=giving_up, max_turns=10)
register_verifiers_environment("vf_add", gold=add_gold, empty=giving_up, max_turns=5)
