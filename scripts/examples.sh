#!/usr/bin/env bash
# `make examples`: KV budgets and a parallel plan for the bundled example clusters, written to
# artifacts/<env>/examples/. No host is needed; `make deploy` is the whole rollout.
set -euo pipefail
env_name="${1:-local}"
root="$(cd "$(dirname "$0")/.." && pwd)"
vfleet="$root/.venv/bin/vfleet"
report="$root/artifacts/$env_name/examples"
mkdir -p "$report"

step() { printf '\n==> %s\n' "$*"; }

step "KV budget: DeepSeek-V3 (FP8) on 8 x H200, TP8, fp8 KV cache, vLLM 0.33"
"$vfleet" budget --model deepseek-ai/DeepSeek-V3 --gpu H200-SXM-141GB --tp 8 \
  --kv-cache-dtype fp8 --max-model-len 32768 --mean-context-len 4096 \
  --sweep-gpu-memory-utilization 0.6:0.95:0.05 --plot "$report/deepseek-v3-h200-tp8-sweep.png" \
  | tee "$report/deepseek-v3-h200-tp8.txt"
"$vfleet" budget --model deepseek-ai/DeepSeek-V3 --gpu H200-SXM-141GB --tp 8 \
  --kv-cache-dtype fp8 --max-model-len 32768 --mean-context-len 4096 --json \
  > "$report/deepseek-v3-h200-tp8.json"

step "KV budget: Llama-3.1-8B on one H100 80GB, vLLM 0.33"
"$vfleet" budget --model meta-llama/Llama-3.1-8B-Instruct --gpu "NVIDIA H100 80GB HBM3" \
  --max-model-len 8192 --mean-context-len 2048 | tee "$report/llama-3.1-8b-h100.txt"

step "Plan: DeepSeek-V3 on the rules' counterexample, a 2 x 8 H100 cluster joined by 25 GbE (chat workload)"
"$vfleet" plan --cluster "$root/examples/clusters/2x8-h100-25gbe.yaml" \
  --model deepseek-ai/DeepSeek-V3 --workload chat --out "$report/plan-deepseek-v3-2x8-h100.json" \
  | tee "$report/plan-deepseek-v3-2x8-h100.txt"

step "Done: outputs in ${report#"$root"/}"
