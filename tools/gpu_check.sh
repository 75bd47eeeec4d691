#!/usr/bin/env bash
# GPU check (≤ 5 minutes on one H100/H200): builds into build-gpu against the
# installed PyTorch (.venv's, else the system python's), runs the CUDA tests
# and the device-path tests, then stint-cuda-bench:
#   D2H snapshot bandwidth / pinned cudaMemcpy bandwidth   target >= 0.8
#   training stall per checkpoint for a ${STINT_BENCH_GB:-10} GB state  target < 1 s
#   time to durable (tier 1, and tier 2 to a second directory)
# Knobs: STINT_BENCH_GB (10), STINT_BENCH_DIR (build-gpu/bench: the NVMe under
# test), STINT_BENCH_REPLICA (build-gpu/bench-replica), JOBS (nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
PY=python3
[[ -x .venv/bin/python ]] && PY=.venv/bin/python
TORCH_PREFIX=$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
echo "== nvidia-smi"; nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv || true
echo "== configure (torch prefix: ${TORCH_PREFIX:-none})"
mkdir -p build-gpu
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
  ${TORCH_PREFIX:+-DCMAKE_PREFIX_PATH="$TORCH_PREFIX"} >build-gpu/configure.log 2>&1 \
  || { tail -30 build-gpu/configure.log; exit 1; }
grep -E "stint: (CUDA|LibTorch)" build-gpu/configure.log
grep -q "stint: CUDA ON" build-gpu/configure.log || { echo "no CUDA toolkit found"; exit 1; }
echo "== build"
targets="cuda_probe_test cuda_copier_test device_snapshot_test tier_memory_test tier_replica_test stint-cuda-bench"
grep -q "LibTorch ON" build-gpu/configure.log && targets="$targets stint_torch"
time ninja -C build-gpu -j"$JOBS" $targets
echo "== tests"
(cd build-gpu && ctest -R 'CudaProbe|CudaCopier|DeviceSnapshot|TierMemory|TierReplica' --output-on-failure --timeout 120)
# A skip here means the driver refused: say so loudly.
if build-gpu/tests/cuda_copier_test 2>&1 | grep -q SKIPPED; then
  echo "WARNING: CUDA tests skipped: $(build-gpu/tests/cuda_probe_test 2>&1 | grep -m1 'no CUDA device' || true)"
fi
echo "== bench"
bench_dir=${STINT_BENCH_DIR:-build-gpu/bench}
replica=${STINT_BENCH_REPLICA:-build-gpu/bench-replica}
rm -rf "$bench_dir" "$replica"
set +e
timeout 240 build-gpu/tools/stint-bench/stint-cuda-bench --root "$bench_dir" --replica "$replica" \
  --state-gb "${STINT_BENCH_GB:-10}" --tensors 64
rc=$?
set -e
rm -rf "$bench_dir" "$replica"
case $rc in
  0) echo "gpu_check: PASS" ;;
  3) echo "gpu_check: bench ran, a target was missed (see above)"; exit 3 ;;
  77) echo "gpu_check: no usable GPU (bench skipped)"; exit 77 ;;
  *) echo "gpu_check: bench failed (rc=$rc)"; exit "$rc" ;;
esac
