"""The reward files' contents are parsed strictly: one finite number, or Harbor's reward.json."""

from __future__ import annotations

import pytest

from arborl.envs.harbor import parse_reward_json, parse_reward_txt
from arborl.envs.harbor.guard import MARK, read_verdict


@pytest.mark.parametrize(("text", "value"), [("1", 1.0), ("0\n", 0.0), (" 0.25 \n", 0.25), ("1e0", 1.0)])
def test_a_reward_txt_is_one_finite_number(text, value):
    assert parse_reward_txt(text) == value


@pytest.mark.parametrize("text", ["", "\n", "passed", "1 1", "1\n0", "nan", "inf", "-inf", "1,0", "0x1"])
def test_anything_else_in_reward_txt_is_refused(text):
    with pytest.raises(ValueError):
        parse_reward_txt(text)


def test_reward_json_is_harbors_flat_object_of_numbers():
    assert parse_reward_json('{"reward": 0.5, "cases": 3, "note": "x"}') == {"reward": 0.5, "cases": 3.0}
    assert parse_reward_json('{"accuracy": 1}') == {"accuracy": 1.0, "reward": 1.0}  # the only number


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[1]", "not an object"),
        ('{"reward": "1"}', "not a finite number"),
        ('{"reward": true}', "not a finite number"),
        ('{"reward": NaN}', "not a finite number"),
        (f'{{"reward": {10**400}}}', "not a finite number"),
        ('{"a": 1, "b": 0}', 'no "reward" key and 2 numbers'),
        ("{}", 'no "reward" key and 0 numbers'),
        ("{", "Expecting"),
    ],
)
def test_a_bad_reward_json_says_why(text, said):
    with pytest.raises(ValueError, match=said):
        parse_reward_json(text)


def test_the_guards_verdict_needs_the_hosts_nonce():
    out = f'tests said things\n{MARK} abc {{"exit_code": 0, "changed_after_exit": false}}\n'
    verdict, rest = read_verdict(out, "abc")
    assert verdict.found and not verdict.changed_after_exit and rest == "tests said things"
    forged, _ = read_verdict(out, "another-nonce")  # a verdict printed by what the tests ran
    assert not forged.found
    assert not read_verdict("no verdict at all\n", "abc")[0].found
