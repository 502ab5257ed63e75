#!/usr/bin/env bash
# The GPU checks a session runs when it is lent a GPU machine (DEVELOPERS.md), in the order
# that matters, in the background, so that a caller can collect what has finished so far.
#
#   bash bench/gpu_session.sh start OUT_DIR [CHECKS]  # starts the checks (setsid), returns at once
#        CHECKS: some of "presets hub nccl bench" (default all four)
#   bash bench/gpu_session.sh wait OUT_DIR S  # waits up to S seconds, then packs OUT_DIR/gpu.tar.gz
#
# 1. at once, side by side: every bundled preset with the README's command (progress bar on),
#    the Hub presets at Qwen2.5-0.5B's shape with and without QLoRA (bench/gpu_hub_shapes.py),
#    and the NCCL launch path with one process (`--nproc-per-node 1`);
# 2. alone, since it times: bench/gpu_bench.py on Qwen2.5-0.5B's shape (ours GRPO/PPO/DPO, TRL,
#    HF generate), then on Qwen2.5-1.5B's (GRPO, ours and TRL).
# Python packages the machine lacks come as wheels in .whl/ (see the device tool's README).
set -u
cmd=${1:?start or wait}; out=${2:?output folder}
logs=/tmp/gpu-session
cd "$(dirname "$0")/.."

if [ "$cmd" = start ]; then
  rm -rf "$logs"; mkdir -p "$logs"
  checks=${3:-presets hub nccl bench}
  setsid bash -c '
    logs='"$logs"'; checks=" '"$checks"' "
    export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
    { nvidia-smi; python3 -c "import torch, transformers, peft, trl; print(torch.__version__, transformers.__version__, peft.__version__, trl.__version__, torch.cuda.get_device_name(0))"; } > $logs/env.txt 2>&1
    pids=()
    [[ $checks == *" presets "* ]] && for p in presets/*.yaml; do
      n=$(basename $p .yaml)
      ( python3 -m engine run $p --run-dir $logs/runs/$n > $logs/preset-$n.log 2>&1; echo "rc=$?" >> $logs/preset-$n.log ) &
      pids+=($!)
    done
    [[ $checks == *" hub "* ]] && ( python3 bench/gpu_hub_shapes.py --steps 4 --out $logs > $logs/hub_shapes.log 2>&1; echo "rc=$?" >> $logs/hub_shapes.log ) &
    pids+=($!)
    [[ $checks == *" nccl "* ]] && ( python3 -m engine run presets/grpo-sort.yaml --nproc-per-node 1 --run-dir $logs/runs/nccl-1 \
        --set training.max_steps=20 > $logs/nccl.log 2>&1; echo "rc=$?" >> $logs/nccl.log ) &
    pids+=($!)
    wait "${pids[@]}"
    echo phase1-done > $logs/phase1
    [[ $checks == *" bench "* ]] || { echo all-done > $logs/done; exit; }
    python3 bench/gpu_bench.py --shape qwen0.5b --steps 4 --out $logs > $logs/bench-qwen0.5b.log 2>&1; echo "rc=$?" >> $logs/bench-qwen0.5b.log
    python3 bench/gpu_bench.py --shape qwen1.5b --steps 4 --side ours --out $logs > $logs/bench-qwen1.5b.log 2>&1; echo "rc=$?" >> $logs/bench-qwen1.5b.log
    python3 bench/gpu_bench.py --shape qwen1.5b --steps 4 --side trl --out $logs/trl > $logs/bench-qwen1.5b-trl.log 2>&1; echo "rc=$?" >> $logs/bench-qwen1.5b-trl.log
    echo all-done > $logs/done
  ' > "$logs/session.log" 2>&1 < /dev/null &
  echo "started; logs in $logs"
  exit 0
fi

if [ "$cmd" = wait ]; then
  limit=${3:-500}; t=0
  while [ ! -f "$logs/done" ] && [ "$t" -lt "$limit" ]; do sleep 5; t=$((t + 5)); done
  ls "$logs"; tail -n 3 "$logs"/*.log 2>/dev/null | tail -n 80
  mkdir -p "$out"
  tar czf "$out/gpu.tar.gz" -C "$logs" --exclude='checkpoints' --exclude='*.safetensors' --exclude='*.pt' . 2>/dev/null
  ls -la "$out"
fi
