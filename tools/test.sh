#!/usr/bin/env bash
# Runs every test: sets up and builds (tools/setup.sh), then the whole ctest
# suite (unit, integration with real files and processes, e2e), then short
# libFuzzer runs of the manifest and chunk readers. Exit status is non-zero
# if anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
BUILD_DIR=${STINT_BUILD_DIR:-build}
status=0
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" --timeout 600 || status=1
if [ -x tools/fuzz.sh ] || [ -f tools/fuzz.sh ]; then
  bash tools/fuzz.sh "${STINT_FUZZ_SECONDS:-20}" || status=1
fi
exit $status
