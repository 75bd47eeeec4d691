#!/usr/bin/env bash
# Runs every test: sets up and builds (tools/setup.sh), short libFuzzer runs
# of the manifest and chunk readers, the installed package built into a
# project outside the tree (find_package) and a pip install of the Python
# package, the unit and integration tests once more under ASan+UBSan (a
# second build dir whose runtime modules link as shared libraries with
# --no-undefined, so a call across an undeclared layer fails to link), then
# the whole ctest suite (unit, integration with real files, processes and
# signals, e2e training runs, pytest). Exit status is non-zero if anything
# failed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
BUILD_DIR=${STINT_BUILD_DIR:-build}
SANITIZE_DIR=${STINT_SANITIZE_BUILD_DIR:-build-asan}
jobs=$(nproc)
status=0
run() { "$@" || { echo "test.sh: FAILED: $*" >&2; status=1; }; }

run bash tools/fuzz.sh "${STINT_FUZZ_SECONDS:-20}"
run bash tools/check_install.sh
run bash tools/check_pip_install.sh

echo "test.sh: ASan+UBSan build of the unit and integration tests in $SANITIZE_DIR"
cmake -S . -B "$SANITIZE_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" -DSTINT_SANITIZE=address,undefined \
  -DBUILD_SHARED_LIBS=ON -DSTINT_CHECK_LAYERS=ON -DSTINT_WITH_TORCH=OFF -DSTINT_WITH_CUDA=OFF >/dev/null
if ninja -C "$SANITIZE_DIR" -j"$jobs"; then
  # halt_on_error: a finding fails the test that triggered it.
  ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run ctest --test-dir "$SANITIZE_DIR" --output-on-failure -j"$jobs" --timeout 600 -L 'unit|integration'
else
  echo "test.sh: FAILED: the sanitizer build" >&2
  status=1
fi

# Last, so ctest's summary of the whole suite is the last thing printed.
run ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$jobs" --timeout 600
exit $status
