#!/usr/bin/env bash
# tensorir quick start. Two commands, each sets up everything it needs first:
#   ./quickstart.sh demo   set up, then compile the bundled sample model to a native library, run it,
#                          validate it against onnxruntime (exit 1 if out of tolerance), show the C API
#   ./quickstart.sh test   set up, then run the whole test suite (extra arguments go to pytest)
# Set-up: Debian packages (as root, only those missing; as another user nothing is installed, the
# missing ones are listed with what they are for) and a local venv in .venv.
set -euo pipefail
cd "$(dirname "$0")"

# package groups: what each is for
PKG_LINK=(lld-14 llvm-14)   # ld.lld links every native library (the demo too); llvm-readelf/objcopy
PKG_ARM64=(qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross)   # ARM64 only: cross builds, qemu runs
PKG_OPENCL=(pocl-opencl-icd ocl-icd-libopencl1)   # OpenCL on the CPU (the OpenCL tests)
PKG_CLANG=(clang-15)   # builds the OpenCL host runtime, the C drivers of the memcheck and adb tests
PKG_VALGRIND=(valgrind)   # memcheck of the compiled zoo (tests/e2e/test_memcheck.py)
PKG_PG=(postgresql)   # initdb / pg_ctl: the tests start a throw-away server (PostgreSQL tuning database)
APT_PACKAGES=("${PKG_LINK[@]}" "${PKG_ARM64[@]}" "${PKG_OPENCL[@]}" "${PKG_CLANG[@]}" "${PKG_VALGRIND[@]}" "${PKG_PG[@]}")
VENV=.venv
PY=${PYTHON:-python3}

is_root() { [ "$(id -u)" -eq 0 ]; }

missing_of() {   # the packages of "$@" that dpkg does not have
  local p out=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || out+=("$p"); done
  echo "${out[*]}"
}

report() {   # report WHY PACKAGES...: one line when some of them are missing
  local why=$1 m
  shift
  m=$(missing_of "$@")
  if [ -n "$m" ]; then echo "  $m: $why"; fi
}

install_apt() {
  local want=()
  "$PY" -c "import ensurepip, venv" 2>/dev/null || want+=(python3-venv)
  read -ra more <<<"$(missing_of "${APT_PACKAGES[@]}")"
  want+=("${more[@]}")
  [ ${#want[@]} -eq 0 ] && return 0
  if is_root; then
    echo "quickstart: apt-get install ${want[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${want[@]}"
    return 0
  fi
  # not root: install nothing, say what is missing and what it is for, and go on
  if [[ " ${want[*]} " == *" python3-venv "* ]]; then
    echo "quickstart: python3-venv is missing (needed to create $VENV); as root: apt-get install python3-venv" >&2
    exit 2
  fi
  echo "quickstart: not root, so no Debian packages are installed; missing (as root: apt-get install ${want[*]}):"
  report "ld.lld links every native library (tir compile, the demo)" "${PKG_LINK[@]}"
  report "ARM64 only (linux-arm64 builds, qemu runs): the ARM64 tests" "${PKG_ARM64[@]}"
  report "OpenCL on the CPU (PoCL): the OpenCL tests" "${PKG_OPENCL[@]}"
  report "builds the OpenCL host runtime (OpenCL targets and tests), the memcheck and adb test drivers" "${PKG_CLANG[@]}"
  report "the memcheck test (tests/e2e/test_memcheck.py)" "${PKG_VALGRIND[@]}"
  report "the PostgreSQL tuning-database tests (tests/pg_server.py starts a server)" "${PKG_PG[@]}"
  return 0
}

have_arm64_tools() {   # what the arm64-marked tests use (tensorir/codegen/link.py)
  { command -v qemu-aarch64 || command -v qemu-aarch64-static; } >/dev/null &&
    command -v aarch64-linux-gnu-gcc >/dev/null && [ -f /usr/aarch64-linux-gnu/lib/libc.so.6 ]
}

setup() {
  if command -v dpkg >/dev/null; then install_apt; fi
  if [ ! -x "$VENV/bin/python" ]; then
    echo "quickstart: creating $VENV"
    "$PY" -m venv "$VENV"
  fi
  # reinstall only when the dependency list changed
  local stamp="$VENV/.tensorir-installed"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "quickstart: installing tensorir and its dependencies into $VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[dev,tf,plot]"   # tf: the TensorFlow frontend; plot: tir tune --plot
    touch "$stamp"
  fi
}

demo() {
  local model=examples/tiny_cnn.onnx out=build/tiny_cnn
  echo "== tir inspect $model --plan"
  "$VENV/bin/tir" inspect "$model" --plan
  echo
  echo "== tir compile $model -o $out"
  "$VENV/bin/tir" compile "$model" -o "$out"
  echo
  echo "== tir run $out --compare-ort --onnx $model    (exit 1 if an output misses its tolerance)"
  "$VENV/bin/tir" run "$out" --compare-ort --onnx "$model"
  echo
  cat <<EOF
== the artifact: $PWD/$out/
  libmodel.so    the model: every kernel, the weights embedded, a C entry point
  model.h        the C API (inputs and outputs with their shapes, TIR_WORKSPACE_BYTES)
  manifest.json  inputs, outputs, target, model hash, workspace, kernels

Calling it from C (buffers are dense, row-major, in the dtypes model.h lists):

  #include "model.h"
  float input[1 * 3 * 32 * 32], logits[1 * 10];
  void *ins[] = {input}, *outs[] = {logits};
  tir_model *m = tir_create(NULL);   /* NULL: weights embedded (else the path of weights.bin) */
  int rc = tir_run(m, ins, outs);    /* 0 on success; one tir_model per thread */
  tir_destroy(m);

  cc app.c -I$out -L$out -lmodel -Wl,-rpath,$PWD/$out -o app
  (or dlopen("$out/libmodel.so") and dlsym "tir_create", "tir_run", "tir_destroy")
EOF
}

case "${1:-}" in
  demo)
    setup
    demo
    ;;
  test)
    setup
    shift
    skip=""
    if ! is_root && ! have_arm64_tools; then
      echo "quickstart: the ARM64 cross packages (${PKG_ARM64[*]}) are missing: the ARM64 tests are" \
           "not run (pytest -m \"not arm64\"); install them as root to run them"
      skip=" and not arm64"
    fi
    # two sessions: TensorFlow's tests in processes of their own (TF loaded into a process
    # breaks PoCL's LLVM there: the OpenCL tests must never share a worker with it)
    "$VENV/bin/python" -m pytest -n 2 --dist loadgroup -p no:cacheprovider -m "not tf$skip" "$@"
    echo "quickstart: the TensorFlow / TFLite frontend tests (pytest -m tf), in their own processes"
    "$VENV/bin/python" -m pytest -n 2 -p no:cacheprovider -m "tf$skip" "$@"
    ;;
  *)
    echo "usage: $0 demo|test [pytest args]" >&2; exit 2 ;;
esac
