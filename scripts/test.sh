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

# Formatting, first: a line clang-format would change fails the run before anything builds.
check_format() {
    echo "=== format"
    scripts/setup.sh none clang-format-14
    find src include tests bench -name '*.cpp' -o -name '*.hpp' | sort | xargs clang-format-14 --dry-run -Werror
    echo "formatted as .clang-format says"
}

# libFuzzer (clang) on the parsers that take untrusted input, FUZZ_SECONDS each (default 60),
# one target per core at a time: the CI budget is 30 minutes on 2 cores.
fuzz_one() {
    local target=$1
    local work="build/fuzz/work-$target"
    mkdir -p "$work"
    local status=0
    build/fuzz/fuzz_$target -max_total_time="${FUZZ_SECONDS:-60}" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="build/fuzz/$target-" "$work" "tests/fuzz/corpus/$target" > "build/fuzz/$target.log" 2>&1 || status=$?
    {
        echo "=== fuzz $target (${FUZZ_SECONDS:-60} s)"
        grep -E "^(Done|stat::number_of_executed_units|==|SUMMARY)" "build/fuzz/$target.log" || true
        if [ "$status" -ne 0 ]; then
            tail -60 "build/fuzz/$target.log"
            echo "fuzz target $target found a failure (exit $status); the input is in build/fuzz/" >&2
        fi
    } > "build/fuzz/$target.summary" 2>&1
    return "$status"
}

run_fuzz() {
    echo "=== fuzz build"
    scripts/setup.sh none clang-14 libclang-rt-14-dev
    CXX=clang++-14 cmake -S tests/fuzz -B build/fuzz > /dev/null
    cmake --build build/fuzz -j "$(nproc)"
    local targets=(config request_body sse units image tokenizer exposition request_framing upstream_response tls_session state_file jwt)
    local failed=0 running=0
    for target in "${targets[@]}"; do
        if [ "$running" -ge "$(nproc)" ]; then
            wait -n || failed=1
            running=$((running - 1))
        fi
        fuzz_one "$target" &
        running=$((running + 1))
    done
    while [ "$running" -gt 0 ]; do
        wait -n || failed=1
        running=$((running - 1))
    done
    for target in "${targets[@]}"; do cat "build/fuzz/$target.summary"; done
    if [ "$failed" -ne 0 ]; then exit 1; fi
}

# The Redis tests start their own redis-server (installed by setup.sh); here its absence fails them.
export TOKENGATE_REQUIRE_REDIS=1
# Likewise the status page's test without Chromium, and the dashboard's without Prometheus.
export TOKENGATE_REQUIRE_BROWSER=1 TOKENGATE_REQUIRE_PROMETHEUS=1
# And the Anthropic SDK's tests without npm's @anthropic-ai/sdk.
export TOKENGATE_REQUIRE_NPM=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
check_format
run_suite release
run_fuzz
run_suite tsan
run_suite asan
