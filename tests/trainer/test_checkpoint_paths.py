"""`model.path` may name a model, a checkpoint, a run's checkpoints/ or a run directory."""

from __future__ import annotations

import pytest

from arborl.agents.engines.weights import resolve_model_dir


def test_a_run_directory_resolves_to_its_latest_checkpoints_model(tmp_path):
    run = tmp_path / "run"
    for name in ("step-000010-sft00000", "step-000020-sft00000"):
        (run / "checkpoints" / name / "model").mkdir(parents=True)
        (run / "checkpoints" / name / "model" / "config.json").write_text("{}")
        (run / "checkpoints" / name / "trainer_state.pt").write_bytes(b"")
    (run / "checkpoints" / "latest").write_text("step-000020-sft00000\n")
    want = str(run / "checkpoints" / "step-000020-sft00000" / "model")
    assert resolve_model_dir(run) == want
    assert resolve_model_dir(run / "checkpoints") == want
    assert resolve_model_dir(run / "checkpoints" / "step-000020-sft00000") == want
    assert resolve_model_dir(want) == want
    assert resolve_model_dir("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"  # a hub id
    with pytest.raises(FileNotFoundError, match="holds no model"):
        resolve_model_dir(tmp_path)
