#!/usr/bin/env bash
# Installs, builds, and runs every test: the release build, then the whole suite again under
# AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."

run_suite() {
    local flavor=$1
    echo "=== $flavor build"
    scripts/setup.sh "$flavor"
    echo "=== $flavor tests"
    (cd "build/$flavor" && ctest --output-on-failure -j 2 --timeout 300)
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
run_suite release
run_suite asan
