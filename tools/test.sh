#!/usr/bin/env bash
# Runs every test: sets up and builds (tools/setup.sh), short libFuzzer runs
# of the manifest and chunk readers, the installed package built into a
# project outside the tree (find_package) and a pip install of the Python
# package, the unit and integration tests once more under ASan+UBSan (a
# second build dir whose runtime modules link as shared libraries with
# --no-undefined, so a call across an undeclared layer fails to link), then
# the whole ctest suite (unit, integration with real files, processes and
# signals, e2e training runs, pytest). Exit status is non-zero if anything
# failed. Each phase's duration is printed before the last one.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${STINT_BUILD_DIR:-build}
SANITIZE_DIR=${STINT_SANITIZE_BUILD_DIR:-build-asan}
jobs=$(nproc)
status=0
phases=()  # "seconds name" of each phase, printed before the last one
run() { "$@" || { echo "test.sh: FAILED: $*" >&2; status=1; }; }
phase() {  # phase NAME COMMAND...: runs it as run does, and times it
  local name=$1 start=$SECONDS
  shift
  run "$@"
  phases+=("$((SECONDS - start)) s  $name")
}

bash tools/setup.sh  # nothing else can run without it
phases+=("$SECONDS s  setup (packages, venv, build)")
phase "fuzz" bash tools/fuzz.sh "${STINT_FUZZ_SECONDS:-20}"
phase "check_install" bash tools/check_install.sh
phase "check_pip_install" bash tools/check_pip_install.sh

echo "test.sh: ASan+UBSan build of the unit and integration tests in $SANITIZE_DIR"
cmake -S . -B "$SANITIZE_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" -DSTINT_SANITIZE=address,undefined \
  -DBUILD_SHARED_LIBS=ON -DSTINT_CHECK_LAYERS=ON -DSTINT_WITH_TORCH=OFF -DSTINT_WITH_CUDA=OFF >/dev/null
start=$SECONDS
# Only what the unit and integration tests link and run (tests/CMakeLists.txt).
if ninja -C "$SANITIZE_DIR" -j"$jobs" stint_unit_integration_tests; then
  phases+=("$((SECONDS - start)) s  sanitizer build")
  # halt_on_error: a finding fails the test that triggered it.
  phase "sanitizer tests (unit, integration)" \
    env ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$SANITIZE_DIR" --output-on-failure -j"$jobs" --timeout 600 -L 'unit|integration'
else
  echo "test.sh: FAILED: the sanitizer build" >&2
  status=1
fi

echo "test.sh: phases so far (the whole suite's ctest follows):"
printf 'test.sh:   %s\n' "${phases[@]}"
# Last, so ctest's summary of the whole suite is the last thing printed.
run ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$jobs" --timeout 600
exit $status
