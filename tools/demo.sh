#!/usr/bin/env bash
# The main demo. 1: examples/spot_demo: a stintd on loopback is fed GPU
# windows that open, shrink and close within three minutes (hard fragments
# and spot capacity), and an elastic LibTorch job (1..3 Gloo workers) lives
# through them beside a higher-priority job: a crash and re-form, window
# closes, a preemption, a spot revocation, each met with an emergency
# checkpoint and a resume elsewhere; it prints the summary (fragment-training
# efficiency against the same job run continuously) and checks the final
# model against an uninterrupted run. 2: examples/slurm_demo: the same on a
# real Slurm (3 nodes x 4 GPUs on this host) under stintd --slurm: a
# LibTorch job through a backfill hole, a reservation, a preemption and a
# drained node, bit-identical to a continuous run (skipped, saying why,
# where Slurm cannot run). 3: a single-process run
# (examples/resumable_training) killed again and again with SIGTERM and
# SIGKILL, compared bit for bit with an uninterrupted one. 4: the
# checkpoints through the `stint` CLI. 5: stint-bench's ratios against fio
# and torch.save on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
BUILD_DIR=${STINT_BUILD_DIR:-build}
TRAIN="$BUILD_DIR/examples/resumable_training"
STINT="$BUILD_DIR/tools/stint/stint"
BENCH="$BUILD_DIR/tools/stint-bench/stint-bench"
WORK=$(mktemp -d /var/tmp/stint-demo-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
STEPS=${STINT_DEMO_STEPS:-600}
ARGS=(--steps "$STEPS" --every 50 --seed 3 --step-ms 4)

echo "== 1. spot_demo: one elastic job across spot and fragment windows"
# STINT_DEMO_STORE=postgresql://... keeps stintd's state in that (empty) database.
.venv/bin/python examples/spot_demo/spot_demo.py --build "$BUILD_DIR" --work-root "$WORK" --keep-work \
  ${STINT_DEMO_STORE:+--store "$STINT_DEMO_STORE"}
SPOT_CKPT=$(ls -d "$WORK"/stint-spot-demo-*/ckpt-train)

echo "== 2. slurm_demo: one job in the holes of a real Slurm, run by stintd --slurm"
.venv/bin/python examples/slurm_demo/slurm_demo.py --build "$BUILD_DIR" --work-root "$WORK"

echo "== 3. one process, preempted again and again: SIGTERM (graceful) and SIGKILL (no grace)"
echo "   uninterrupted reference run ($STEPS steps)"
"$TRAIN" --ckpt-dir "$WORK/reference" "${ARGS[@]}" > "$WORK/reference.log"
want=$(awk '/^final step/ {print $NF}' "$WORK/reference.log")
echo "   reference checksum $want"

echo "   the same run, killed at random moments"
kills=0
got=""
for attempt in $(seq 1 40); do
  out="$WORK/attempt-$attempt.log"
  "$TRAIN" --ckpt-dir "$WORK/preempted" "${ARGS[@]}" > "$out" 2>&1 &
  pid=$!
  while ! grep -q '^ready' "$out" 2>/dev/null && kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
  resumed=$(grep -o 'resumed from step [0-9]*' "$out" | awk '{print $4}')
  if [ "$kills" -lt 8 ]; then
    sleep "0.$((RANDOM % 5 + 2))"
    if [ $((kills % 2)) = 0 ]; then sig=TERM; else sig=KILL; fi
    kill -"$sig" "$pid" 2>/dev/null || true
    set +e; wait "$pid" 2>/dev/null; rc=$?; set -e
    kills=$((kills + 1))
    # The run may complete before the signal lands: a SIGTERM then changes
    # nothing (exit 0); a SIGKILL still kills the process, after its checkpoint.
    if [ "$rc" = 137 ] && grep -q '^final step' "$out"; then rc=0; fi
    case "$rc" in
      75) echo "   attempt $attempt: resumed at step $resumed, SIGTERM -> $(grep -o 'preempted at step [0-9]*: .*' "$out"), exit 75 (requeue)";;
      137) echo "   attempt $attempt: resumed at step $resumed, SIGKILL -> died; the steps since its last checkpoint are lost";;
      0) got=$(awk '/^final step/ {print $NF}' "$out"); echo "   attempt $attempt: finished before the signal"; break;;
      *) echo "   attempt $attempt: unexpected exit $rc"; cat "$out"; exit 1;;
    esac
    continue
  fi
  wait "$pid"
  got=$(awk '/^final step/ {print $NF}' "$out")
  echo "   attempt $attempt: resumed at step $resumed and ran to the end, checksum $got"
  break
done
if [ "$got" = "$want" ]; then
  echo "   OK: after $kills preemptions the final parameters and optimizer state are bit-identical to the uninterrupted run"
else
  echo "   MISMATCH: $got != $want"; exit 1
fi

echo "== 4. the checkpoints, through the stint CLI"
"$STINT" ls "$SPOT_CKPT"
"$STINT" verify "$SPOT_CKPT" --all
"$STINT" ls "$WORK/preempted"
# Into a file, then head: with pipefail a `| head` that closes early makes
# the inspector die of SIGPIPE and the demo exit 141.
"$STINT" inspect "$WORK/preempted" > "$WORK/inspect.txt"
head -24 "$WORK/inspect.txt"
"$STINT" verify "$WORK/preempted" --all

echo "== 5. stint-bench --quick (ratios against fio and torch.save, same run)"
mkdir -p "$WORK/bench"
"$BENCH" --quick --dir "$WORK/bench" || echo "   (benchmark failed; see above)"
