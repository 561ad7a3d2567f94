"""`Turn.step_label`: an env's per-step label reaches the trajectory (the agent fills it from the
step's info), survives Parquet (old files read as unlabelled), and reaches the batch as
``step_labels`` (the ``oracle_step`` estimator's field)."""

from __future__ import annotations

import dataclasses

import gymnasium
import pyarrow as pa
import pyarrow.parquet as pq
from agent_helpers import agent_for

import arborl.envs  # noqa: F401 - registers the arborl/* ids
from arborl.agents.trajectory import SCHEMA, Trajectory, Turn, _row, read_trajectories, write_trajectories
from arborl.tasks.toy import tool_cues as tc
from arborl.trainer.dataproto import trajectories_to_dataproto


def _labelled() -> Trajectory:
    return Trajectory(
        prompt_ids=[1, 2],
        turns=[
            Turn([3], [-0.5], observation_ids=[4], step_label=1.0),
            Turn([5], [-0.25], observation_ids=[6], step_label=-1.0),
            Turn([7], [-1.0]),
        ],
        group_id="g",
        outcome_reward=1.0,
    )


def test_step_labels_survive_parquet_and_old_files_read_as_unlabelled(tmp_path):
    traj = _labelled()
    back = read_trajectories(write_trajectories(tmp_path / "a.parquet", [traj]))
    assert back == [traj] and [t.step_label for t in back[0].turns] == [1.0, -1.0, None]
    # a v5 file (no step_label in its turns) still reads, every turn unlabelled
    turn_v5 = pa.struct([f for f in SCHEMA.field("turns").type.value_type if f.name != "step_label"])
    schema_v5 = pa.schema(
        [pa.field("turns", pa.list_(turn_v5)) if f.name == "turns" else f for f in SCHEMA],
        metadata={b"arborl.trajectory_schema": b"5"},
    )
    row = _row(traj)
    row["turns"] = [{k: v for k, v in turn.items() if k != "step_label"} for turn in row["turns"]]
    pq.write_table(pa.Table.from_pylist([row], schema=schema_v5), tmp_path / "v5.parquet")
    old = read_trajectories(tmp_path / "v5.parquet")[0]
    assert [t.step_label for t in old.turns] == [None, None, None]
    assert [dataclasses.replace(t, step_label=None) for t in traj.turns] == old.turns


def test_the_batch_carries_one_label_per_turn_unlabelled_as_zero():
    data = trajectories_to_dataproto([_labelled(), Trajectory(prompt_ids=[1], turns=[Turn([2], [0.0])])], 0)
    assert [tuple(r) for r in data.non_tensor_batch["step_labels"]] == [(1.0, -1.0, 0.0), (0.0,)]


async def test_the_agent_records_each_turns_label_from_the_envs_step_info(tok):
    """A walk through a tool-cues house by the agent loop (a scripted demonstrator): the door
    turns are labelled +1 / -1 as the door tool judged them; the last door ends the episode."""
    task = tc.load_suite()[0]
    right = task.metadata["right"]
    wrong = [next(c for c in tc.COLOURS if c != r) for r in right]
    doors = [wrong[0], right[0], right[1], wrong[2], right[2], *right[3:]]
    replies = iter([tc.tool_call("door", {"colour": c}) for c in doors])
    env = gymnasium.make("arborl/Tool-v0")
    try:
        ep = await agent_for(None, tok, max_turns=tc.MAX_TURNS).run_episode(
            env, task, demo=lambda messages, info: next(replies)
        )
    finally:
        env.close()
    assert ep.trajectory.outcome_reward == 1.0
    assert [t.step_label for t in ep.trajectory.turns] == [-1.0, 1.0, 1.0, -1.0, 1.0, 1.0, 1.0, 1.0]
    assert [i.get("step_label") for i in ep.infos[1:]] == [t.step_label for t in ep.trajectory.turns]
