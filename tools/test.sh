#!/usr/bin/env bash
# Runs every test: sets up and builds (tools/setup.sh), short libFuzzer runs
# of the manifest and chunk readers, then the whole ctest suite (unit,
# integration with real files, processes and signals, e2e training runs).
# Exit status is non-zero if anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
BUILD_DIR=${STINT_BUILD_DIR:-build}
status=0
# Fuzz first, so ctest's summary is the last thing printed.
bash tools/fuzz.sh "${STINT_FUZZ_SECONDS:-20}" || status=1
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" --timeout 600 || status=1
exit $status
