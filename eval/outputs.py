"""Per-instance outputs under the run directory.

    <run>/instances/<instance id>/sample-<k>/
        transcript.json      the chat: system prompt, task, every reply and observation
        infos.json           the env's info of every step (verifier results at the end)
        rewards.json         the reward of every step
        screens/turn-NNN.png envs that see pixels: the screenshot after reset (000) and each step;
                             for a policy shown pictures, the pictures it was shown (turn-NNN-J.png
                             a turn's J-th after its first), which transcript.json's image parts
                             name as {"type": "image", "file": ..., "width", "height"}
        trajectory.parquet   model agent: token ids, log-probs, loss mask (arborl.agents.trajectory)
        <the episode's files> what the benchmark's hook keeps of any episode, graded or
                             not (`Benchmark.episode_files`: a code task's patch)
        <the grade's files>  what the benchmark's hook keeps (SWE-bench: grade.json, the
                             grading report, and test.log, the whole harness output)
        error.txt            when the attempt failed (infra error, timeout, harness error)

A text file over 1 MiB is stored gzip-compressed (`test.log.gz`); `read_output` reads either.
A retried attempt overwrites its sample's directory.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path
from typing import Any

from arborl.envs.benchmarks import ENV_GRADED, Benchmark, EpisodeRecord, Grade

from .screens import transcript_images

#: A grade's text file longer than this (bytes) is stored gzip-compressed, as NAME.gz.
GZIP_BYTES = 1024 * 1024


def write_output(out: Path, name: str, content: str | bytes) -> Path:
    """Store one of a grade's files in `out`: as it is, or NAME.gz when it is large text."""
    data = content.encode("utf-8", errors="replace") if isinstance(content, str) else content
    if isinstance(content, str) and len(data) > GZIP_BYTES:
        path = out / f"{name}.gz"
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path = out / name
        path.write_bytes(data)
    return path


def read_output(out: Path, name: str) -> str:
    """The text file `name` stored in `out` (either form); '' if there is none."""
    if (out / f"{name}.gz").is_file():
        return gzip.decompress((out / f"{name}.gz").read_bytes()).decode("utf-8", errors="replace")
    if (out / name).is_file():
        return (out / name).read_text(encoding="utf-8", errors="replace")
    return ""


def instance_dir(run_dir: Path, instance_id: str, sample: int) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "__", instance_id).strip("._") or "instance"
    return run_dir / "instances" / safe / f"sample-{sample}"


def _dump(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False, default=str), encoding="utf-8")


def write_outputs(
    run_dir: Path,
    instance_id: str,
    sample: int,
    record: EpisodeRecord | None,
    grade: Grade | None = None,
    error: str | None = None,
    benchmark: Benchmark = ENV_GRADED,
) -> Path:
    """Write what one attempt produced; returns the directory (relative paths go in the store).
    `benchmark`: the suite's hook, which says what files an episode leaves."""
    out = instance_dir(run_dir, instance_id, sample)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if record is not None:
        messages, pictures = transcript_images(record.messages)
        _dump(out / "transcript.json", messages)
        in_files = set(benchmark.info_keys_in_files)
        _dump(out / "infos.json", [{k: v for k, v in i.items() if k not in in_files} for i in record.infos])
        _dump(out / "rewards.json", record.rewards)
        screens = {f"screens/turn-{turn:03d}.png": png for turn, png in record.screenshots.items()}
        screens.update(pictures)  # what the model was shown, where it was shown a picture
        if screens:
            (out / "screens").mkdir()
            for name, png in sorted(screens.items()):
                (out / name).write_bytes(png)
        for name, content in benchmark.episode_files(record).items():
            # as it is, however large (the viewer reads it so): not a grade's file
            path = out / name
            path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        if record.trajectory is not None:
            from arborl.agents.trajectory import write_trajectories

            write_trajectories(out / "trajectory.parquet", [record.trajectory])
    for name, content in (grade.files if grade is not None else {}).items():
        write_output(out, name, content)
    if error:
        (out / "error.txt").write_text(error + "\n", encoding="utf-8")
    return out
