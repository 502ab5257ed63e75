#!/usr/bin/env bash
# The GPU checks a session runs when it is lent a GPU machine (DEVELOPERS.md), in the order
# that matters, in the background, so that a caller can collect what has finished so far.
#
#   bash bench/gpu_session.sh start OUT_DIR [CHECKS]  # starts the checks (setsid), returns at once
#        CHECKS: some of "presets hub nccl bench speed" (default the first four)
#   bash bench/gpu_session.sh wait OUT_DIR S  # waits up to S seconds, then packs OUT_DIR/gpu.tar.gz
#   bash bench/gpu_session.sh speed OUT_DIR [--smoke]  # issue 42's figures, in the foreground (below)
#   bash bench/gpu_session.sh wheels  # here, with pip: the wheels the GPU machine lacks, into .whl/
#
# `speed` (issue 42): bench/gpu_bench.py at Qwen2.5-0.5B's and Qwen2.5-1.5B's shapes, GRPO, ours
# against TRL 1.16 (plain generate), ours also with each speed-up off alone (the captured decode
# step: model.decode plain; the lean update: RL_ENGINE_LEAN_UPDATE=0), and decoding alone (HF
# generate, our plain and captured paths) at 0.5B. It prints decode tokens/s, rollout and update
# seconds a step, peak memory, update MFU and each speed-up alone; figures in OUT_DIR/speed/.
# `--smoke`: the same commands at the tiny shape on the CPU (minutes), to test the script anywhere.
# Not timed yet on a GPU: at the last session's speeds about 6-7 minutes a shape; with less device
# time left, SPEED_SHAPES=qwen0.5b runs one.
#
# 1. at once, side by side: every bundled preset with the README's command (progress bar on),
#    the Hub presets at Qwen2.5-0.5B's shape with and without QLoRA (bench/gpu_hub_shapes.py),
#    and the NCCL launch path with one process (`--nproc-per-node 1`);
# 2. alone, since it times: bench/gpu_bench.py on Qwen2.5-0.5B's shape (ours GRPO/PPO/DPO, TRL,
#    HF generate), then on Qwen2.5-1.5B's (GRPO, ours and TRL).
# Python packages the machine lacks come as wheels in .whl/ (see the device tool's README).
set -u
cmd=${1:?start, wait, speed or wheels}; out=${2:-}
[ "$cmd" = wheels ] || : "${out:?an output folder}"
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
logs=/tmp/gpu-session
cd "$(dirname "$0")/.."

# Wheels carried in .whl/ (trl, datasets: the machine has torch, transformers, peft, accelerate).
if ls .whl/*.whl > /dev/null 2>&1 && [ -z "${GPU_SESSION_WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} GPU_SESSION_WHEELS=1
fi

if [ "$cmd" = wheels ]; then  # run where pip reaches the index; versions as this checkout's .venv has them
  mkdir -p .whl; grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
  py=${PYTHON:-.venv/bin/python}
  pkgs=$($py -c "import importlib.metadata as m; print(' '.join(f'{n}=={m.version(n)}' for n in
    ('trl', 'datasets', 'dill', 'multiprocess')))")
  for pkg in $pkgs; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .whl "$pkg" || echo "could not download $pkg"
  done
  ls -la .whl; exit 0
fi

if [ "$cmd" = speed ]; then
  dest=${out}/speed; mkdir -p "$dest"
  if [ "${3:-}" = --smoke ]; then
    py=${PYTHON:-.venv/bin/python}; [ -x "$py" ] || py=python3
    shapes=tiny; flags="--smoke"; export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
  else
    py=${PYTHON:-python3}; shapes=${SPEED_SHAPES:-qwen0.5b qwen1.5b}; flags="--device cuda --steps 3 --algorithms grpo"
  fi
  export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
  rc=0
  for shape in $shapes; do
    sides=ours,trl,generate; [ "$shape" = qwen1.5b ] && sides=ours,trl  # decoding alone at 0.5B only
    echo "== $shape: $sides"
    # shellcheck disable=SC2086  # flags are words
    $py bench/gpu_bench.py --shape "$shape" $flags --side $sides --ablations --out "$dest" > "$dest/$shape.log" 2>&1 \
      || { echo "$shape: failed (log $dest/$shape.log)"; rc=1; }
    grep -v '^\[' "$dest/$shape.log"
  done
  echo "figures: $dest"; exit $rc
fi

if [ "$cmd" = start ]; then
  rm -rf "$logs"; mkdir -p "$logs"
  checks=${3:-presets hub nccl bench}
  if [ "$checks" = speed ]; then  # alone: it times
    setsid bash -c "bash '$self' speed '$logs'; echo all-done > '$logs/done'" > "$logs/speed.log" 2>&1 < /dev/null &
    echo "started; logs in $logs"; exit 0
  fi
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
