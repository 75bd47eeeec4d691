#!/usr/bin/env bash
# GPU check: every test that needs a device, then the benchmarks, on a machine
# with one GPU (two-GPU cases skip there). About 3-4 minutes on one H100/H200
# after the build (5 at most); a cold build of the targets below adds a few
# minutes on 16 cores.
#
#   tools/gpu_check.sh            # configure + build into build-gpu, test, bench
#
# 1. configure build-gpu (Release, Ninja, ccache when installed) against the
#    PyTorch of $PYTHON (default: .venv/bin/python, else python3); CUDA is required
# 2. build only what runs here: the CUDA/NCCL/LibTorch-CUDA tests, the Python
#    module, stint-cuda-bench
# 3. ctest: tests/unit/cuda_probe_test, cuda_copier_test, device_snapshot_test,
#    lazy_snapshot_test (the barrier's stream choice, through the host double),
#    nccl_communicator_test, nccl_policy_test, tests/e2e/elastic_nccl_test,
#    tests/integration/torch_cuda_test and the CUDA cases of torch_state_test
# 4. pytest tests/python/test_cuda.py
# 5. stint-cuda-bench (C++: D2H snapshot / pinned cudaMemcpyAsync, stall per
#    checkpoint, time to durable and its ratio to fio's O_DIRECT write of the
#    same bytes) and tools/stint-bench/gpu_bench.py (through
#    torch: D2H snapshot / pinned torch copies, step time with a checkpoint
#    every k steps / without on a >= 2 GB model, stint lazy and eager vs
#    torch.save, time to durable)
# 6. with 2+ GPUs: tools/stint-bench/sharded_bench.py --device cuda, one rank
#    per GPU over NCCL (stall, time to durable and load at N/2 against DCP;
#    aggregate persist against fio numjobs=N); with one GPU it says it skipped
# A summary at the end. Exit: 0 all tests passed and the bench ran with its
# targets met; 1 a test failed (or skipped for want of a device while one is
# visible); 2 configure or build failed; 3 tests passed, a bench target was
# missed; 4 tests passed, a bench failed; 77 no GPU visible (nothing run).
#
# Knobs: GPU_CHECK_ALLOW_NO_DEVICE=1 runs everything without a GPU (the device
# tests skip, the benches report "no device"; exit 0 if nothing failed: checks
# this script's plumbing, verifies nothing on a device). BUILD_DIR (build-gpu),
# JOBS (nproc), PYTHON, STINT_BENCH_GB (4: state of the snapshot benches),
# STINT_BENCH_MODEL_GB (2.2), STINT_SHARDED_MIB (4096: the N-GPU state), STINT_BENCH_DIR ($BUILD_DIR/bench: the disk
# under test), GPU_CHECK_SKIP_BENCH=1. With $OUT set, the log, the benches'
# output and gpu_bench.json go there.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
PYTHON=${PYTHON:-}
if [[ -z "$PYTHON" ]]; then
  PYTHON=python3
  [[ -x .venv/bin/python ]] && PYTHON=$PWD/.venv/bin/python
fi
PYTHON=$(command -v "$PYTHON" || echo "$PYTHON")
ALLOW_NO_DEVICE=${GPU_CHECK_ALLOW_NO_DEVICE:-0}
LOGDIR=${OUT:-$BUILD_DIR}
mkdir -p "$BUILD_DIR" "$LOGDIR"
exec > >(tee "$LOGDIR/gpu_check.log") 2>&1
tee_pid=$!

start=$SECONDS
declare -a summary=()
note() { summary+=("$(printf '%-34s %s' "$1" "$2")"); }
finish() {
  echo
  echo "== summary (${1}; $((SECONDS - start)) s in all)"
  printf '  %s\n' "${summary[@]}"
  exec >&- 2>&-
  wait "$tee_pid" 2>/dev/null
  exit "$2"
}

echo "== device"
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current \
    --format=csv 2>/dev/null || true
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
if [[ "$gpus" == 0 ]]; then
  gpus=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null || echo 0)
fi
echo "GPUs visible: $gpus"
if [[ "$gpus" == 0 ]]; then
  if [[ "$ALLOW_NO_DEVICE" != 1 ]]; then
    note "device" "none visible: nothing run (GPU_CHECK_ALLOW_NO_DEVICE=1 to check the plumbing)"
    finish "NO DEVICE" 77
  fi
  note "device" "NONE: device tests skip, nothing is verified on a GPU"
fi

echo "== configure $BUILD_DIR (python: $PYTHON)"
t=$SECONDS
TORCH_PREFIX=$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
[[ -f "$BUILD_DIR/CMakeCache.txt" ]] && build_type=() || build_type=(-DCMAKE_BUILD_TYPE=Release)
if ! cmake -S . -B "$BUILD_DIR" -G Ninja "${build_type[@]}" \
    ${TORCH_PREFIX:+-DCMAKE_PREFIX_PATH="$TORCH_PREFIX"} -DPython_EXECUTABLE="$PYTHON" \
    >"$BUILD_DIR/configure.log" 2>&1; then
  tail -30 "$BUILD_DIR/configure.log"
  note "configure" "FAILED (see $BUILD_DIR/configure.log)"
  finish "FAILED" 2
fi
grep -E "stint: (CUDA|LibTorch|NCCL|Python)" "$BUILD_DIR/configure.log"
for need in "stint: CUDA ON" "stint: LibTorch ON" "stint: Python module ON"; do
  if ! grep -q "$need" "$BUILD_DIR/configure.log"; then
    note "configure" "FAILED: no '$need' (CUDA toolkit, PyTorch, pybind11 in $PYTHON)"
    finish "FAILED" 2
  fi
done
note "configure" "ok ($((SECONDS - t)) s)"

echo "== build"
t=$SECONDS
wanted="cuda_probe_test cuda_copier_test device_snapshot_test lazy_snapshot_test nccl_communicator_test nccl_policy_test
        elastic_nccl_test torch_cuda_test torch_state_test stint_python stint-cuda-bench"
available=$(ninja -C "$BUILD_DIR" -t targets all 2>/dev/null | sed 's/:.*//')
targets=()
for w in $wanted; do
  if grep -qx "$w" <<<"$available"; then targets+=("$w"); else echo "not configured here: $w"; fi
done
if ! ninja -C "$BUILD_DIR" -j"$JOBS" "${targets[@]}"; then
  note "build" "FAILED"
  finish "FAILED" 2
fi
note "build" "ok ($((SECONDS - t)) s: ${targets[*]})"

failed=0
echo "== C++ device tests"
t=$SECONDS
regex='^(CudaProbe|CudaCopier|DeviceSnapshot|LazySnapshot|NcclTypes|NcclUniqueId|NcclFactory|NcclSingleRank|NcclTwoRanks|NcclVersion|NcclRecovery|NcclStaging|NcclElasticTest|TorchCudaTest)\.|^TorchStateTest\.CudaTensorsAreCopiedToHost$|^TorchRng\.'
ctest_log="$LOGDIR/ctest_device.log"
(cd "$BUILD_DIR" && ctest -R "$regex" -V --timeout 300) >"$ctest_log" 2>&1
ctest_rc=$?
grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|tests failed" "$ctest_log"
ran=$(grep -cE "^ *[0-9]+/[0-9]+ Test" "$ctest_log" || true)
skipped=$(grep -cE "^ *[0-9]+/[0-9]+ Test.*Skipped" "$ctest_log" || true)
if [[ $ctest_rc != 0 || $ran == 0 ]]; then
  grep -E -B2 -A20 "\[  FAILED  \]|Failure$" "$ctest_log" | head -120
  note "C++ device tests" "FAILED (rc $ctest_rc, $ran tests; log $ctest_log)"
  failed=1
else
  note "C++ device tests" "ok: $ran tests, $skipped skipped ($((SECONDS - t)) s)"
fi
if [[ "$gpus" != 0 ]] && grep -q "no CUDA device" "$ctest_log"; then
  echo "UNEXPECTED: a test skipped for want of a device while $gpus are visible:"
  grep -B3 "no CUDA device" "$ctest_log" | head -30
  note "C++ device tests" "FAILED: skipped with 'no CUDA device' on a machine with $gpus GPU(s)"
  failed=1
fi

echo "== Python device tests (tests/python/test_cuda.py)"
t=$SECONDS
py_log="$LOGDIR/pytest_cuda.log"
(cd tests/python && STINT_PYTHON_PATH="$PWD/../../$BUILD_DIR/python_bindings" timeout 300 \
  "$PYTHON" -m pytest -q -rs -p no:cacheprovider --basetemp="$PWD/../../$BUILD_DIR/pytest-cuda" \
  test_cuda.py) >"$py_log" 2>&1
py_rc=$?
tail -25 "$py_log"
if [[ $py_rc != 0 ]]; then
  note "Python device tests" "FAILED (rc $py_rc; log $py_log)"
  failed=1
else
  note "Python device tests" "ok: $(tail -1 "$py_log" | tr -d '=' | sed 's/^ *//') ($((SECONDS - t)) s)"
fi
if [[ "$gpus" != 0 ]] && grep -q "SKIPPED.*no CUDA device" "$py_log"; then
  note "Python device tests" "FAILED: skipped with 'no CUDA device' on a machine with $gpus GPU(s)"
  failed=1
fi
if [[ $failed != 0 ]]; then
  finish "TESTS FAILED" 1
fi

if [[ "${GPU_CHECK_SKIP_BENCH:-0}" == 1 ]]; then
  note "bench" "skipped (GPU_CHECK_SKIP_BENCH=1)"
  finish "PASS (tests only)" 0
fi
bench_dir=${STINT_BENCH_DIR:-$BUILD_DIR/bench}
bench_rc=0
echo "== stint-cuda-bench (C++: ${STINT_BENCH_GB:-4} GB)"
t=$SECONDS
rm -rf "$bench_dir"
timeout 200 "$BUILD_DIR/tools/stint-bench/stint-cuda-bench" --root "$bench_dir/cxx" \
  --replica "$bench_dir/cxx-replica" --state-gb "${STINT_BENCH_GB:-4}" --tensors 64 \
  2>&1 | tee "$LOGDIR/cuda_bench.txt"
rc=${PIPESTATUS[0]}
rm -rf "$bench_dir"
while read -r line; do note "  cuda-bench" "$line"; done < <(grep -E "^(ratio|stall|time to durable|durable / fio)" "$LOGDIR/cuda_bench.txt")
case $rc in
  0) note "stint-cuda-bench" "ok, targets met ($((SECONDS - t)) s)" ;;
  3) note "stint-cuda-bench" "ran, a target MISSED (see above)"; bench_rc=3 ;;
  77) note "stint-cuda-bench" "no usable device: not measured" ;;
  *) note "stint-cuda-bench" "FAILED (rc $rc)"; bench_rc=4 ;;
esac

echo "== gpu_bench.py (torch: ${STINT_BENCH_GB:-4} GB snapshot, ${STINT_BENCH_MODEL_GB:-2.2} GB model)"
t=$SECONDS
json=$LOGDIR/gpu_bench.json
STINT_PYTHON_PATH="$PWD/$BUILD_DIR/python_bindings" timeout 240 "$PYTHON" \
  tools/stint-bench/gpu_bench.py --root "$bench_dir/py" --state-gb "${STINT_BENCH_GB:-4}" \
  --model-gb "${STINT_BENCH_MODEL_GB:-2.2}" --json "$json"
rc=$?
rm -rf "$bench_dir"
[[ -f "$json" ]] && while read -r line; do note "  gpu_bench" "$line"; done < <("$PYTHON" - "$json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s, t = d.get("snapshot"), d.get("training")
if s:
    print("snapshot %.2f GB: stint %.1f GB/s / pinned torch D2H %.1f GB/s = %.2f; durable %.2f s"
          % (s["bytes"] / 1e9, s["stint_staged_gbs"], s["pinned_d2h_gbs"], s["ratio"],
             sorted(s["durable_s"])[len(s["durable_s"]) // 2]))
if t:
    print("model %.2f GB, checkpoint every %d steps:" % (t["state_bytes"] / 1e9, t["every"]))
    for c in t["configs"][1:]:
        print("  %-18s step time x%.3f, +%.3f s per checkpoint"
              % (c["config"], c["ratio_mean_step"], c["added_per_checkpoint_s"]))
    if "lazy_added_over_torch_save" in t:
        print("  stint lazy added / torch.save: %.4f" % t["lazy_added_over_torch_save"])
    print("  durable (model state) %.2f s warm" % t["durable_s"]["warm"])
PY
)
case $rc in
  0)
    if "$PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if all(d.get("targets", {}).values()) else 3)' "$json"; then
      note "gpu_bench.py" "ok, targets met ($((SECONDS - t)) s; $json)"
    else
      note "gpu_bench.py" "ran, a target MISSED ($json)"
      [[ $bench_rc == 0 ]] && bench_rc=3
    fi ;;
  77) note "gpu_bench.py" "no usable device: not measured" ;;
  *) note "gpu_bench.py" "FAILED (rc $rc)"; bench_rc=4 ;;
esac

echo "== sharded_bench.py (N = $gpus GPUs, one rank per GPU, NCCL; ${STINT_SHARDED_MIB:-4096} MiB)"
t=$SECONDS
if [[ "$gpus" -lt 2 ]]; then
  echo "sharded N-GPU figures: skipped: $gpus GPU visible, they need 2 or more"
  note "sharded_bench.py" "skipped: $gpus GPU visible, the N-GPU figures need 2 or more"
else
  sjson=$LOGDIR/sharded_bench.json
  PYTHONPATH="$PWD/$BUILD_DIR/python_bindings" timeout 420 "$PYTHON" \
    tools/stint-bench/sharded_bench.py --device cuda --dir "$bench_dir" --worlds "$gpus" \
    --total-mib "${STINT_SHARDED_MIB:-4096}" --json "$sjson" 2>&1 | tee "$LOGDIR/sharded_bench.txt"
  rc=${PIPESTATUS[0]}
  rm -rf "$bench_dir"
  while read -r line; do note "  sharded" "$line"; done < <(grep -E "^stint (stall|time-to-durable|aggregate)|^dcp.load time" "$LOGDIR/sharded_bench.txt")
  case $rc in
    0) note "sharded_bench.py" "ran ($((SECONDS - t)) s; $sjson)" ;;
    *) note "sharded_bench.py" "FAILED (rc $rc)"; bench_rc=4 ;;
  esac
fi

if [[ "$gpus" == 0 ]]; then
  finish "PLUMBING ONLY: no GPU, nothing verified on a device" "$bench_rc"
fi
case $bench_rc in
  0) finish "PASS" 0 ;;
  3) finish "TESTS PASS, A BENCH TARGET MISSED" 3 ;;
  *) finish "TESTS PASS, A BENCH FAILED" 4 ;;
esac
