#!/usr/bin/env bash
# Installs the build (cmake --install) into a fresh prefix and builds
# examples/find_package_consumer against it, as a project outside this tree
# would: find_package(stint), stint::stint and stint::torch. Runs both
# consumers; exit status non-zero if any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${STINT_BUILD_DIR:-build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$BUILD_DIR" --prefix "$work/prefix" >/dev/null
torch_prefix=$(.venv/bin/python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
cmake -S examples/find_package_consumer -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix;$torch_prefix" -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
ninja -C "$work/build" >/dev/null
out=$("$work/build/consumer" "$work/ckpt")
echo "$out"
grep -q "stint::torch" <<<"$out" || { echo "check_install: stint::torch was not installed" >&2; exit 1; }
for tool in stintd stintctl stint; do
  [ -x "$work/prefix/bin/$tool" ] || { echo "check_install: bin/$tool not installed" >&2; exit 1; }
done
echo "check_install: find_package(stint) consumer built and ran against $BUILD_DIR's install"
