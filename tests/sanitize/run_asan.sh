#!/usr/bin/env bash
# The capture's C extensions built with AddressSanitizer, in a temporary copy of this checkout, and the tests that
# drive the C path run against them (tests/tracer/test_hotpath.py, test_kernel_contract.py, test_kernel_parity.py,
# test_capture_basic.py, and a reference-leak check, refcount_check.py). Not part of the README's test command: a maintainer runs it after
# changing a .c file. Usage: tests/sanitize/run_asan.sh [extra pytest arguments]
#
# CPython itself is not built with ASan, so leak detection is off (the interpreter keeps memory until exit);
# out-of-bounds reads and writes, use after free and double frees in the extensions are reported and abort.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
CC="${CC:-gcc}"
LIBASAN="$("$CC" -print-file-name=libasan.so)"
[ -f "$LIBASAN" ] || { echo "no libasan.so for $CC: install gcc's AddressSanitizer runtime" >&2; exit 2; }
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tlx-asan.XXXXXX")"
REPORTS="${TLX_ASAN_REPORTS:-$ROOT/test-artifacts/asan}"  # ASan's reports (pytest's capture would swallow them)
rm -rf "$REPORTS" && mkdir -p "$REPORTS"
report() {
  local rc=$?
  if ls "$REPORTS"/report.* >/dev/null 2>&1; then
    echo "== AddressSanitizer reports (kept in $REPORTS)"; cat "$REPORTS"/report.*
  else
    echo "== no AddressSanitizer report"
  fi
  rm -rf "$WORK"
  exit $rc
}
trap report EXIT

# A copy of the sources the tests import (never the checkout's own .so files).
for part in tracer exporters app tests static setup.py pyproject.toml README.md; do
  [ -e "$ROOT/$part" ] && cp -r "$ROOT/$part" "$WORK/"
done
find "$WORK" \( -name '__pycache__' -o -name '*.so' \) -prune -exec rm -rf {} +

echo "== building the extensions with -fsanitize=address in $WORK"
(cd "$WORK" && CC="$CC" CFLAGS="-fsanitize=address -fno-omit-frame-pointer -g -O1" LDFLAGS="-fsanitize=address" \
  "$PY" setup.py -q build_ext --inplace --build-temp "$WORK/build" >"$WORK/build.log" 2>&1) \
  || { tail -40 "$WORK/build.log"; exit 1; }
for so in "$WORK"/tracer/capture/_*.so; do
  nm -D "$so" | grep -q __asan_ || { echo "$so is not instrumented" >&2; exit 1; }
done

# libstdc++ preloaded right after the ASan runtime: else ASan's __cxa_throw interceptor finds no real one and
# aborts at the first C++ exception torch throws (it throws them routinely, e.g. from meta-device kernels).
export LD_PRELOAD="$LIBASAN $("$CC" -print-file-name=libstdc++.so.6)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:print_summary=1:log_path=$REPORTS/report:${ASAN_OPTIONS:-}"
export PYTHONPATH="$WORK" PYTHONDONTWRITEBYTECODE=1
unset TORCHLENS_EXPLORE_PURE_PYTHON TORCHLENS_EXPLORE_KERNEL
cd "$WORK"
# The copy's instrumented build is the one imported, it matches its sources, and the C kernel is on.
"$PY" -W error::RuntimeWarning -c "
from tracer.capture.kernel import native
assert native.ACTIVE and native._ext.__file__.startswith('$WORK'), native._ext
print('instrumented kernel:', native._ext.__file__)"
echo "== tests under AddressSanitizer"
"$PY" -m pytest tests/tracer/test_hotpath.py tests/tracer/test_kernel_contract.py tests/tracer/test_kernel_parity.py \
  tests/tracer/test_capture_basic.py -q -p no:cacheprovider -n 0 "$@"  # one process (the conftest needs xdist loaded)
echo "== reference-leak check under AddressSanitizer"
"$PY" tests/sanitize/refcount_check.py
