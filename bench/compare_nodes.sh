#!/usr/bin/env bash
# Two limiterd binaries (an old build and a new one) under the same load, alternated round by
# round so that the machine's drift falls on both: checks/s and the node's CPU per check,
# batched (256 checks a frame) and one check a frame. For before/after figures of a change
# to the node's frame path (docs/benchmarks/node.md).
#   bench/compare_nodes.sh OLD_LIMITERD NEW_LIMITERD [ROUNDS] [SECONDS] [LIMITER_BENCH]
set -euo pipefail
old=$1
new=$2
rounds=${3:-3}
seconds=${4:-5}
bench=${5:-$(dirname "$0")/../build/bench/limiter-bench}
loads=("--connections 2 --depth 4 --batch 256" "--connections 4 --depth 8 --batch 1")
printf '%-28s %-4s %5s %14s %18s\n' load bin round checks/s node_cpu_us/check
for ((r = 1; r <= rounds; ++r)); do
  for load in "${loads[@]}"; do
    for which in old new; do
      bin=$old
      [ "$which" = new ] && bin=$new
      # shellcheck disable=SC2086
      json=$("$bench" node --limiterd "$bin" $load --node-threads 1 --keys 10000 \
        --duration "$seconds" --json 2>/dev/null)
      python3 -c 'import json, sys
j = json.loads(sys.argv[1])
print("%-28s %-4s %5s %14.0f %18.3f" % (sys.argv[2], sys.argv[3], sys.argv[4], j["checks_per_s"],
                                       j["node_cpu_us_per_check"]))' "$json" "$load" "$which" "$r"
    done
  done
done
