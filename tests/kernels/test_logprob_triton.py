"""Runs the Triton kernel cases (``triton_cases.py``): under the Triton interpreter on CPU in
a subprocess (the interpreter flag must be set before the kernels are decorated, i.e. before
``arborl.kernels.logprob_triton`` is imported, so a fresh interpreter is the robust way), and
in-process on CUDA hosts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

CASES = Path(__file__).with_name("triton_cases.py")
REPO = Path(__file__).resolve().parents[2]
MIN_CASES = 10


def test_triton_kernels_under_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(CASES)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    passed = re.search(r"(\d+) passed", out)
    assert passed and int(passed.group(1)) >= MIN_CASES, out
    assert "skipped" not in out, out  # nothing may fall back or skip under the interpreter


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_triton_kernels_on_cuda():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(CASES)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
