"""A run's KL anchor, its entropy guard and its seeds, end to end on the tiny model: the KL's
reference is the policy as RL starts (after the warm start, and again after a resume); an
exploding entropy stops the run cleanly; a seeded sync run repeats its rollouts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import torch
from arith_suite import train_config as config  # also registers the test-arith suite
from safetensors.torch import load_file

from arborl.agents import read_trajectories
from arborl.tasks.stream import task_stream
from arborl.trainer.local.checkpoint import Checkpointer
from arborl.trainer.local.metrics_log import read_metrics
from arborl.trainer.local.trainer import Trainer

# sync; the tiny model scores 0 on every task, so uniform groups are kept to train on at all
SYNC = {"async": {"mode": "sync"}, "algorithm": {"drop_uniform_groups": False}}


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(model_dir / "model.safetensors"))


def test_the_kl_reference_is_the_policy_after_the_warm_start_and_survives_a_resume(tmp_path):
    run = tmp_path / "kl"
    # zero advantages: the entropy bonus moves the policy off its reference
    learner = {"use_kl_loss": True, "kl_loss_coef": 0.1, "entropy_coeff": 0.01, "lr": 1e-3}
    cfg = config(run, learner=learner, run={"steps": 2, "keep_checkpoints": 5}, **SYNC)
    trainer = Trainer(cfg)
    asyncio.run(trainer.run())
    warm = next(p for p in Checkpointer(run).dir.glob("step-000000-*"))  # the warm start's end
    ref = weights(run / "reference")
    assert all(torch.equal(ref[k], v) for k, v in weights(warm / "model").items())
    base = trainer.ctx.cfg.model  # the tiny model the warm start began from
    assert base.path is None and trainer.ctx.state.sft_steps == 3
    live = dict(trainer.ctx.learner.ref_model.named_parameters())
    assert all(torch.equal(live[k], ref[k]) for k in live)
    rl = [e for e in read_metrics(run) if e["phase"] == "rl"]
    assert rl[0]["actor/kl_loss"] == 0.0 and rl[1]["actor/kl_loss"] > 0  # π_θ = π_ref at step 1

    resumed = Trainer(config(run, learner=learner, run={"steps": 3, "keep_checkpoints": 5}, **SYNC))
    asyncio.run(resumed.run())
    again = dict(resumed.ctx.learner.ref_model.named_parameters())
    assert all(torch.equal(again[k], ref[k]) for k in again)  # not the resumed step-2 weights


def test_an_exploding_entropy_stops_the_run_with_its_checkpoint_and_the_reason(tmp_path):
    run = tmp_path / "guard"
    guard = {"factor": None, "max_entropy": 1e-3, "patience": 1}  # any entropy explodes
    cfg = config(run, sft={"steps": 0}, run={"steps": 4, "entropy_guard": guard}, **SYNC)
    summary = asyncio.run(Trainer(cfg).run())
    assert summary["rl_steps"] == 1
    assert "run.entropy_guard.max_entropy" in summary["stopped"] and "RL step 1" in summary["stopped"]
    events = read_metrics(run)
    stopped = [e for e in events if e["phase"] == "stopped"]
    assert len(stopped) == 1 and stopped[0]["reason"] == summary["stopped"] and stopped[0]["step"] == 1
    assert any(e["phase"] == "eval-rl" and e["step"] == 1 for e in events)  # evaluated as a last step
    ckpt = Checkpointer(run)
    assert ckpt.load(ckpt.latest())[1].version == 1


def _first_batch(run: Path) -> dict[int, list[list[int]]]:
    """The first batch's groups (task indices 0 and 1): their episodes' tokens (prompt +
    responses), in episode order. (Sync mode starts the next batch after the update; the run
    ends while it is in flight.)"""
    return {
        i: [
            t.token_ids().tolist() for t in read_trajectories(run / "trajectories" / f"group-{i:06d}.parquet")
        ]
        for i in (0, 1)
    }


def test_a_seeded_sync_run_repeats_its_first_batch_and_another_seed_does_not(tmp_path):
    """Repeated with the engine decoding one row at a time instead of all together: each
    episode's noise is its own (per-request generators), not the order rows take from one
    stream, so the tokens are the same however the engine batched them."""

    def first_batch(name: str, seed: int, batch: int = 64) -> dict[int, list[list[int]]]:
        run = tmp_path / name
        sections = {
            "model": {"engine_options": {"max_batch_size": batch}},
            "sft": {"steps": 0},
            "run": {"steps": 1, "seed": seed},
            "rollout": {"max_new_tokens": 24},
        }
        asyncio.run(Trainer(config(run, **sections, **SYNC)).run())
        return _first_batch(run)

    a, b, other = first_batch("a", 7), first_batch("b", 7, batch=1), first_batch("c", 8)
    assert a == b  # the same tokens, group by group, episode by episode
    assert a != other
    # each episode of a group draws its own noise: the group is not one episode three times
    assert all(len({tuple(ids) for ids in group}) > 1 for group in a.values())


def test_the_task_stream_follows_tasks_seed():
    first = [task_stream("arith_suite:generate", 200, 0, {})(i).id for i in range(8)]
    again = [task_stream("arith_suite:generate", 200, 0, {})(i).id for i in range(8)]
    other = [task_stream("arith_suite:generate", 200, 1, {})(i).id for i in range(8)]
    assert first == again and first != other


def test_seeded_tree_rollouts_repeat_and_their_branches_draw_their_own_noise(tmp_path):
    """A tree's roots and branches share its group id; each draws its own seed all the same
    (no two leaves alike), and the same seed grows the same tree again."""

    def first_batch(name: str) -> dict[int, list[list[int]]]:
        run = tmp_path / name
        sections = {
            "sft": {"steps": 0},
            "run": {"steps": 1, "seed": 3},
            "rollout": {"max_new_tokens": 24, "tree": {"leaves": 4, "roots": 2}},
        }
        asyncio.run(Trainer(config(run, **sections, **SYNC)).run())
        return _first_batch(run)

    a, b = first_batch("a"), first_batch("b")
    assert a == b
    assert all(len(leaves) == 4 and len({tuple(ids) for ids in leaves}) == 4 for leaves in a.values())
