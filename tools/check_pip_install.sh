#!/usr/bin/env bash
# Checks the pip install of the Python package the way a user does it:
#   pip install --no-build-isolation .
# into a fresh virtual environment, then `import stint` from another
# directory and a small save/load.
#
#   bash tools/check_pip_install.sh
#
# pip builds from the checkout itself (in CI a clean clone) into a build
# directory of its own, build-pip-check/, emptied first: a full configure and
# build of the extension. That directory sits beside build/ (tools/setup.sh),
# so the compile commands are the same ones, relative to the checkout, and
# ccache serves the objects the main build compiled (CCACHE_BASEDIR is the
# checkout, as setup.sh sets it): the check costs a configure and a link, not
# a second compile. The fresh venv is made from the project .venv's
# interpreter and sees that venv's packages (torch, pybind11,
# scikit-build-core) through a .pth file, so nothing large is downloaded; the
# package is installed into the fresh venv only. STINT_VENV_PYTHON picks
# another interpreter; CMAKE_BUILD_PARALLEL_LEVEL the build's parallelism;
# STINT_KEEP=1 keeps the temporary directory.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY_BASE=${STINT_VENV_PYTHON:-$REPO/.venv/bin/python}
if ! "$PY_BASE" -c "import torch, pybind11" 2>/dev/null; then
  echo "check_pip_install: $PY_BASE cannot import torch and pybind11; run tools/setup.sh" >&2
  exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/stint-pip-check.XXXXXX")
if [ "${STINT_KEEP:-0}" = 1 ]; then
  echo "check_pip_install: keeping $WORK"
else
  trap 'rm -rf "$WORK"' EXIT
fi

# 1. A fresh venv that sees the project venv's packages.
VENV=$WORK/venv
"$PY_BASE" -m venv --without-pip "$VENV"
PY=$VENV/bin/python
"$PY_BASE" -c 'import sysconfig; p = sysconfig.get_paths(); print(p["purelib"]); print(p["platlib"])' |
  sort -u > "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/stint-check-base.pth"
"$PY" -c "import torch, pybind11, pip" >/dev/null
if ! "$PY" -c "import scikit_build_core" 2>/dev/null; then
  echo "check_pip_install: scikit-build-core is not in $PY_BASE's venv (tools/setup.sh installs it); installing it into the check venv"
  "$PY" -m pip install -q scikit-build-core
fi

# 2. pip install from the checkout, into an empty build directory.
BUILD=$REPO/build-pip-check
rm -rf "$BUILD"
export CCACHE_BASEDIR=$REPO CCACHE_NOHASHDIR=true
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
# The main build's compilers by the same names (pip's own default is g++, the
# main build's c++: the same compiler, but another ccache key).
same_compilers=()
MAIN_CACHE=$REPO/${STINT_BUILD_DIR:-build}/CMakeCache.txt
for lang in C CXX; do
  compiler=$(sed -n "s/^CMAKE_${lang}_COMPILER:FILEPATH=//p" "$MAIN_CACHE" 2>/dev/null || true)
  [ -n "$compiler" ] && same_compilers+=(-C "cmake.define.CMAKE_${lang}_COMPILER=$compiler")
done
echo "check_pip_install: pip install --no-build-isolation . (build log: $WORK/pip.log)"
if ! (cd "$REPO" && "$PY" -m pip install --no-build-isolation -v -C build-dir="$BUILD" "${same_compilers[@]}" . \
        > "$WORK/pip.log" 2>&1); then
  tail -50 "$WORK/pip.log" >&2
  echo "check_pip_install: FAILED: pip install" >&2
  exit 1
fi
grep -E "^ *-- stint:|^Successfully installed" "$WORK/pip.log" || true

# 3. Import from elsewhere (not the copy, not a build tree) and a save/load.
cd /tmp
env -u PYTHONPATH -u STINT_PYTHON_PATH STINT_CHECK_DIR="$WORK/ckpt" STINT_CHECK_VENV="$VENV" "$PY" - <<'EOF'
import importlib.metadata
import json
import os

import stint
import torch

pkg = os.path.dirname(stint.__file__)
assert pkg.startswith(os.environ["STINT_CHECK_VENV"] + "/"), "stint imported from %s" % pkg
for name in ("py.typed", "_C.pyi", "pytree.py"):
    assert os.path.exists(os.path.join(pkg, name)), "%s missing from the installed package" % name
meta = importlib.metadata.version("stint")
assert stint.__version__ == stint._C.__version__ == meta, (stint.__version__, stint._C.__version__, meta)
print("stint", stint.__version__, "from", pkg)

with stint.Checkpointer(os.environ["STINT_CHECK_DIR"], keep_last=2) as ckpt:
    state = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "step": 7, "blob": b"\x00\x01"}
    staged, durable = ckpt.save(7, state)
    assert durable.result(60) == 7
    back = ckpt.load()
    assert torch.equal(back["w"], state["w"]) and back["step"] == 7 and back["blob"] == b"\x00\x01", back
    assert ckpt.list_committed() == [7]
with open(os.path.join(os.environ["STINT_CHECK_DIR"], "step-00000007", "MANIFEST.json")) as f:
    writer = json.load(f)["manifest"]["writer"]
assert writer == "stint " + stint.__version__, writer
print("save/load OK; manifest writer:", writer)
EOF
echo "check_pip_install: OK"
