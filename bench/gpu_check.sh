#!/usr/bin/env bash
# ManiSkill3 PickCube-v1 on a CUDA GPU (physx_cuda, 1024 rows), in under 8 minutes:
#   1. the bare env loop (bench/envs.py: env steps/s, planner and MLP query latency),
#   2. `odsd collect --mode dagger_sync` with the planner at the same row count (the collector's
#      env steps/s, printed per iteration: compare with 1),
#   3. a short DAgger run: the collector waiting for each student (--policy-wait) beside `odsd learn`.
#
#   bench/gpu_check.sh                   # ROWS=1024 DEVICE=cuda PY=.venv/bin/python OUT=<tmp dir>
#
# Prepared for a GPU machine; not run on the 2-core CPU machine (figures: docs/performance.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
ROWS=${ROWS:-1024}
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-$(mktemp -d /tmp/odsd-gpu-check.XXXXXX)}
TASK=maniskill:PickCube-v1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"

echo "== 1. bare loop: $TASK, $ROWS rows on $DEVICE"
timeout 150 "$PY" bench/envs.py --device "$DEVICE" --tasks "$TASK" --rows "$ROWS" --steps 200

echo "== 2. collector: dagger_sync, planner labels, $ROWS rows"
timeout 150 "$PY" -m odsd collect --mode dagger_sync --task "$TASK" --expert planner --device "$DEVICE" \
  --num-envs "$ROWS" --episodes-per-iteration "$ROWS" --max-iterations 3 --store "$OUT/collect" \
  --durability process --seed 0

echo "== 3. short DAgger: collector + learner, 4 iterations"
"$PY" -m odsd collect --mode dagger_sync --task "$TASK" --expert planner --device "$DEVICE" \
  --num-envs "$ROWS" --episodes-per-iteration "$ROWS" --max-iterations 4 --policy-wait 120 \
  --store "$OUT/dagger" --durability process --seed 1 >"$OUT/dagger.log" 2>&1 &
collector=$!
until ls "$OUT"/dagger/runs/*/run.json >/dev/null 2>&1 || ! kill -0 "$collector" 2>/dev/null; do sleep 1; done
timeout 200 "$PY" -m odsd learn "$OUT/dagger" --device "$DEVICE" --min-new-episodes "$ROWS" --steps 500 \
  >"$OUT/learn.log" 2>&1 &
learner=$!
if ! timeout 220 tail --pid="$collector" -f /dev/null; then kill "$collector" 2>/dev/null || true; fi
wait "$collector" || echo "collector exited with $?"
kill "$learner" 2>/dev/null || true
grep -E "^\[iteration\]" "$OUT/dagger.log" || tail -20 "$OUT/dagger.log"
echo "outputs in $OUT"
