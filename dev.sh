#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine: installs what is missing, builds, runs.
#   ./dev.sh main    the main job (Release build)
#   ./dev.sh test    the whole test suite (ASan+UBSan build, -Werror), what CI runs
#   ./dev.sh bench   the micro benchmarks (Release build)
# A second run rebuilds only what changed (ninja, and ccache when present).
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(
  g++ cmake ninja-build ccache pkg-config
  libasio-dev libflatbuffers-dev flatbuffers-compiler libxxhash-dev libyaml-cpp-dev
  libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev librocksdb-dev
  libcpp-httplib-dev libhiredis-dev redis-server curl
)
JOBS="${JOBS:-2}"

install_missing() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  echo "dev.sh: installing ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# build DIR CMAKE_ARGS...: configure once, then build incrementally.
build() {
  local dir=$1
  shift
  [ -f "$dir/build.ninja" ] || cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$JOBS"
}

case "${1:-}" in
  main)
    install_missing
    build build -DCMAKE_BUILD_TYPE=Release
    build/client/ctl/limiterctl replay --trace examples/traces/seed.csv --algorithm all \
      --limit 10 --window 1000
    ;;
  test)
    install_missing
    build build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLIMITER_WERROR=ON \
      -DLIMITER_SANITIZE=address,undefined
    ctest --test-dir build-test --output-on-failure -j "$JOBS" --timeout 600
    ;;
  bench)
    install_missing
    build build -DCMAKE_BUILD_TYPE=Release
    build/bench/limiter_micro_bench --benchmark_repetitions=10 \
      --benchmark_report_aggregates_only=true "${@:2}"
    ;;
  *)
    echo "usage: ./dev.sh main|test|bench" >&2
    exit 2
    ;;
esac
