#!/usr/bin/env bash
# The main demo: a real LibTorch training run (examples/train_mlp) is
# SIGKILLed at random moments and restarted each time; it resumes from its
# newest committed checkpoint, and its final parameters are compared bit for
# bit with an uninterrupted run. Then the checkpoints are listed, inspected
# and verified with the `stint` CLI, and stint-bench measures persist,
# restore and stall against fio and torch.save on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
BUILD_DIR=${STINT_BUILD_DIR:-build}
TRAIN="$BUILD_DIR/examples/train_mlp"
STINT="$BUILD_DIR/tools/stint/stint"
BENCH="$BUILD_DIR/tools/stint-bench/stint-bench"
WORK=$(mktemp -d /var/tmp/stint-demo-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
STEPS=${STINT_DEMO_STEPS:-400}
ARGS=(--steps "$STEPS" --every 25 --hidden 128 --seed 3)

echo "== 1. uninterrupted reference run ($STEPS steps)"
"$TRAIN" --ckpt-dir "$WORK/reference" "${ARGS[@]}" > "$WORK/reference.log"
want=$(awk '/^final step/ {print $NF}' "$WORK/reference.log")
echo "   reference checksum $want"

echo "== 2. the same run, SIGKILLed at random moments and restarted"
kills=0
for attempt in $(seq 1 20); do
  "$TRAIN" --ckpt-dir "$WORK/killed" "${ARGS[@]}" > "$WORK/attempt-$attempt.log" 2>&1 &
  pid=$!
  if [ "$kills" -lt 4 ]; then
    sleep "0.$((RANDOM % 9 + 1))"
    if kill -KILL "$pid" 2>/dev/null; then
      wait "$pid" 2>/dev/null || true
      kills=$((kills + 1))
      resumed=$(grep -o 'resumed from step [0-9]*' "$WORK/attempt-$attempt.log" | awk '{print $4}' || true)
      echo "   attempt $attempt: SIGKILL (it had resumed from step ${resumed:-0})"
      continue
    fi
  fi
  wait "$pid"
  got=$(awk '/^final step/ {print $NF}' "$WORK/attempt-$attempt.log")
  resumed=$(grep -o 'resumed from step [0-9]*' "$WORK/attempt-$attempt.log" | awk '{print $4}' || true)
  echo "   attempt $attempt: ran to the end (resumed from step ${resumed:-0}), checksum $got"
  break
done
if [ "$got" = "$want" ]; then
  echo "   OK: after $kills kills the final parameters are bit-identical to the uninterrupted run"
else
  echo "   MISMATCH: $got != $want"; exit 1
fi

echo "== 3. the checkpoints, through the stint CLI"
"$STINT" ls "$WORK/killed"
"$STINT" inspect "$WORK/killed" | head -30
"$STINT" verify "$WORK/killed" --all

echo "== 4. stint-bench --quick (ratios against fio and torch.save, same run)"
"$BENCH" --quick --dir "$WORK/bench" || echo "   (benchmark failed; see above)"
