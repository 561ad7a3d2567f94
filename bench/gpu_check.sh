#!/usr/bin/env bash
# GPU check (issue 20), about 8 minutes on one CUDA GPU. Run from anywhere in the repo on a GPU
# host where arborl is installed for GPUs (pip install -e '.[dev,triton,vllm]': CUDA torch,
# triton, vllm). Writes everything under $OUT (default bench/results/gpu_check/):
#   device.txt       the GPU (nvidia-smi) and the software versions
#   kernels.md       fused log-prob + entropy at N=8192, d=4096, V=151,936 (and V=32,000), bf16:
#                    arborl's Triton kernel and chunked torch kernel against materialised logits
#                    and against verl's own kernels (FusedLinearForPPO, linear_cross_entropy):
#                    fwd+bwd time and peak extra memory (targets: >= 1.5x faster and >= 5x less
#                    memory than materialised, not slower than verl's)
#   engines.log      vLLM engine's per-token log-probs against the HF engine's scoring, before and
#                    after a weight push (tests/agents/engines/test_engines_vllm.py, on the GPU)
#   verl_train.log   `arborl verl-train` (verl's RayPPOTrainer, FSDP, vLLM server, arborl's loop
#   verl_metrics.jsonl  on tool-mini, gigpo) for 3 steps on this one GPU with the tiny model
# Copy the numbers into docs/kernels.md and docs/trainer.md with the device name.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
OUT=${OUT:-bench/results/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
status=0
step() { printf '\n\033[1m[gpu-check]\033[0m %s\n' "$*"; }

step "device"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  "$PY" -c "import verl, vllm, triton; print('verl', verl.__version__, 'vllm', vllm.__version__, 'triton', triton.__version__)"
} 2>&1 | tee "$OUT/device.txt"

step "1/3 fused log-prob + entropy kernels (~3 min)"
timeout 240 "$PY" bench/bench_kernels.py --only gpu --out "$OUT/kernels.md" || status=1

step "2/3 vLLM engine log-probs vs the HF engine's (~1.5 min)"
timeout 150 "$PY" -m pytest -q -p no:cacheprovider tests/agents/engines/test_engines_vllm.py \
  -k "logprobs_match or weight_update" 2>&1 | tee "$OUT/engines.log" || status=1

step "3/3 arborl verl-train, 3 steps of gigpo on tool-mini, one GPU (~3 min)"
DATA=$(mktemp -d)
MODEL=$("$PY" -c "from arborl.agents.tiny import ensure_tiny_model; print(ensure_tiny_model())")
"$PY" -m arborl.cli verl-data tool-mini "$DATA" >/dev/null
VERL_FILE_LOGGER_PATH="$OUT/verl_metrics.jsonl" timeout 300 "$PY" -m arborl.cli verl-train \
  actor_rollout_ref.model.path="$MODEL" \
  data.train_files="$DATA/train.parquet" data.val_files="$DATA/val.parquet" \
  data.train_batch_size=2 data.max_prompt_length=384 data.max_response_length=256 \
  trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.total_training_steps=3 \
  'trainer.logger=[console,file]' trainer.val_before_train=false trainer.test_freq=-1 trainer.save_freq=-1 \
  actor_rollout_ref.rollout.n=4 actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.3 actor_rollout_ref.rollout.agent.num_workers=1 \
  actor_rollout_ref.actor.ppo_mini_batch_size=2 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
  actor_rollout_ref.model.use_remove_padding=false '+actor_rollout_ref.model.override_config.attn_implementation=sdpa' \
  algorithm.adv_estimator=gigpo arborl.max_turns=3 arborl.credit_log="$OUT/verl_credit.jsonl" \
  2>&1 | tee "$OUT/verl_train.log" | grep -E "step:|Training Progress|Error" || status=1
"$PY" - "$OUT/verl_metrics.jsonl" <<'PY' || status=1
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for r in rows:
    d = r["data"]
    print(f"step {r['step']}: {d.get('timing_s/step', 0):.1f} s, vLLM vs actor log-prob diff max "
          f"{d.get('training/rollout_probs_diff_max')}, grad norm {d.get('actor/grad_norm')}")
assert [r["step"] for r in rows] == [1, 2, 3], "verl-train did not log 3 steps"
PY
rm -rf "$DATA"
step "done (status $status): results in $OUT"
exit $status
