#!/usr/bin/env bash
# Fills .whl/costmodel/ (git-ignored) for the device's Python 3.12, which has neither
# lightgbm nor scipy: lightgbm's wheel, and scipy.sparse alone (what `import lightgbm`
# loads: scipy's top-level modules, scipy/_lib and scipy/sparse without their tests,
# linalg and csgraph) as scipy-sparse-only.tar.gz; scipy's whole wheel (35 MB) with the
# checkout passes a device call's 64 MiB. benchmarks/gpu_run.sh installs them there.
set -euo pipefail
D=.whl/costmodel T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$D"
python3 -m pip download -q -d "$T" --only-binary=:all: --no-deps --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 lightgbm scipy
cp "$T"/lightgbm-*.whl "$D/"
mkdir -p "$T/x" "$T/k/scipy/sparse"
python3 -m zipfile -e "$T"/scipy-*.whl "$T/x"
cp "$T"/x/scipy/*.py "$T"/x/scipy/*.so "$T/k/scipy/"
cp -r "$T/x/scipy/_lib" "$T/k/scipy/" && rm -rf "$T/k/scipy/_lib/tests"
cp "$T"/x/scipy/sparse/*.py "$T"/x/scipy/sparse/*.so "$T/k/scipy/sparse/"
cp -r "$T"/x/scipy-*.dist-info "$T/k/"
tar czf "$D/scipy-sparse-only.tar.gz" -C "$T/k" .
ls -la "$D"
