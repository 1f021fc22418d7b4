#!/usr/bin/env bash
# Adds to .device/ what the GPU host needs for issue 14's and 15's figures beyond what
# ../shared/device/make_parts.sh packs (TensorFlow, Beam, Keras): simplejpeg (a core dependency
# of the build that the host's image lacks) beside make_parts.sh's wheels, so that those pieces
# alone run a build; NVIDIA DALI for CUDA 13 with nvImageCodec and nvJPEG (the host's JAX is a
# CUDA 13 build) and dask[distributed] for the feed and Dask benchmarks. The host reaches no
# registry, so these travel unpacked, as one xz archive:
#   .device/extra-aa, extra-ab, ...   pieces of that archive (~180 MB together)
# benchmarks/device/pack.sh then packs these, make_parts.sh's pieces and its wheels into as few
# transfers as the device tool allows; benchmarks/device/run.sh unpacks them on the host.
# Run from the project root after make_parts.sh; ~4 minutes of CPU (xz). The recipe, call by
# call, is in benchmarks/RESULTS.md ("On the GPU host").
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
[ -f .device/setup.sh ] || { echo "run ../shared/device/make_parts.sh first" >&2; exit 1; }
pin() { grep -i "^$1==" requirements.txt | cut -d= -f3; }
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
  --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# No dependency resolution: the host already has NumPy, psutil and what JAX and PyTorch bring;
# a second copy of those on PYTHONPATH would shadow the host's own. So: exactly these wheels.
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps $PLAT -d "$tmp/wheels" \
  nvidia-dali-cuda130==2.4.0 nvidia-nvimgcodec-cu13==0.9.0.20 "nvidia-nvjpeg>=13,<14" \
  nvidia-nvjpeg2k-cu13==0.11.0.51 nvidia-nvtiff-cu13==0.8.0.82 nvidia-libnvcomp-cu13==5.3.0.16 \
  nvtx makefun "libcst~=1.8" six packaging \
  "dask==$(pin 'dask\[distributed\]')" "distributed==$(pin 'dask\[distributed\]')" cloudpickle \
  fsspec partd locket toolz pyyaml click msgpack sortedcontainers tblib tornado urllib3 zict \
  jinja2 markupsafe
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps $PLAT -d .device/wheels "simplejpeg==$(pin simplejpeg)"
mkdir "$tmp/site"
for wheel in "$tmp"/wheels/*.whl; do unzip -qo "$wheel" -d "$tmp/site"; done
# The NVIDIA wheels make `nvidia` a regular package; first on PYTHONPATH it would hide the host's
# own nvidia/* (the CUDA libraries of its JAX). extend_path merges every `nvidia` on sys.path.
echo '__path__ = __import__("pkgutil").extend_path(__path__, __name__)' > "$tmp/site/nvidia/__init__.py"
rm -f .device/extra-*
(cd "$tmp/site" && tar cf - . | xz -9 -T0) | split -b 50M - .device/extra-
ls -la .device/extra-*
echo "Now run benchmarks/device/pack.sh (benchmarks/RESULTS.md, 'On the GPU host')"
