#!/usr/bin/env bash
# tensorir quick start. Two commands, each sets up everything it needs first:
#   ./quickstart.sh demo   set up, then import + run the bundled sample model and compare with onnxruntime
#   ./quickstart.sh test   set up, then run the whole test suite
# Set-up: Debian packages (as root, only those missing) and a local venv in .venv.
set -euo pipefail
cd "$(dirname "$0")"

APT_PACKAGES=(qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross lld-14 llvm-14   # ARM64 cross build + qemu runs
              pocl-opencl-icd ocl-icd-libopencl1 clang-15   # OpenCL on the CPU (tests); clang builds the OpenCL host runtime
              valgrind)   # memcheck of the compiled zoo (tests/e2e/test_memcheck.py)
VENV=.venv
PY=${PYTHON:-python3}

install_apt() {
  local want=()
  "$PY" -c "import ensurepip, venv" 2>/dev/null || want+=(python3-venv)
  for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || want+=("$p"); done
  [ ${#want[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "quickstart: please install as root: apt-get install ${want[*]}" >&2; exit 2
  fi
  echo "quickstart: apt-get install ${want[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${want[@]}"
}

setup() {
  command -v dpkg >/dev/null && install_apt
  if [ ! -x "$VENV/bin/python" ]; then
    echo "quickstart: creating $VENV"
    "$PY" -m venv "$VENV"
  fi
  # reinstall only when the dependency list changed
  local stamp="$VENV/.tensorir-installed"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "quickstart: installing tensorir and its dependencies into $VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[dev,tf]"   # tf: the TensorFlow frontend's tests
    touch "$stamp"
  fi
}

case "${1:-}" in
  demo)
    setup
    echo "== tir inspect examples/tiny_cnn.onnx"
    "$VENV/bin/tir" inspect examples/tiny_cnn.onnx
    echo "== tir run examples/tiny_cnn.onnx --compare-ort"
    "$VENV/bin/tir" run examples/tiny_cnn.onnx --compare-ort
    ;;
  test)
    setup
    shift
    "$VENV/bin/python" -m pytest -n 2 -p no:cacheprovider "$@"
    ;;
  *)
    echo "usage: $0 demo|test [pytest args]" >&2; exit 2 ;;
esac
