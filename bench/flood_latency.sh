#!/bin/bash
# The key-flood benchmark (docs/benchmarks/key-flood.md): a legitimate client's latency
# while another client with the secret floods one policy with new keys.
#
#   bench/flood_latency.sh BUILD_DIR RATE [RUNS] [SECONDS]
#
# RATE: the flood's new keys a second after its warm-up (4,000,000 new keys at once, of which
# the policy keeps 1,000,000); 0 starts no flood at all. The node (one worker) and the flood
# share core 0, the legitimate client (20,000 checks/s, one check a frame, on one connection,
# for SECONDS, 12 by default) has core 1. Each run prints the legitimate client's latency and
# how late its own sends were, the flood's ops a second while it measured, the node's CPU and
# RSS; before it, with the flood alone for 4 s, the node's average time a frame (its
# limiter_frame_duration_seconds), and before anything starts, the machine alone for 3 s
# (`limiter-bench hiccups`: how late a thread on each core wakes, nothing of ours running).
# Traffic stays on 127.0.0.1; ports 7621 and 7622 must be free.
#
# The flood's generator runs at nice FLOOD_NICE (19 by default): a real flood comes from other
# machines, and at nice 19 the generator takes the node's core only when the node does not
# want it. FLOOD_NICE=0 has them share the core as equals (the attacker's CPU work then delays
# the node too). The legitimate client has one connection: each connection is a thread, and
# four of them on one core wait for each other (+0.5 ms at p99 with no flood at all).
set -euo pipefail

build=${1:?usage: $0 BUILD_DIR RATE [RUNS] [SECONDS]}
rate=${2:?usage: $0 BUILD_DIR RATE [RUNS] [SECONDS]}
runs=${3:-1}
seconds=${4:-12}
flood_nice=${FLOOD_NICE:-19}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
node_pid=""
flood_pid=""
cleanup() {
  [ -n "$flood_pid" ] && kill "$flood_pid" 2>/dev/null && wait "$flood_pid" 2>/dev/null
  [ -n "$node_pid" ] && kill "$node_pid" 2>/dev/null && wait "$node_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/secret"

# The flooded policy's ops the node has decided or refused.
cheap_ops() {
  curl -s 127.0.0.1:7622/metrics |
    awk '/^limiter_(decisions_total|policy_key_refusals_total)\{policy="cheap"/ {s += $2} END {print s + 0}'
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The node's frames so far and the seconds it spent handling them.
frame_totals() {
  curl -s 127.0.0.1:7622/metrics | awk '
    /^limiter_frame_duration_seconds_count/ {n = $2}
    /^limiter_frame_duration_seconds_sum/ {s = $2}
    END {print n, s}'
}

for ((run = 1; run <= runs; ++run)); do
  echo "  the machine alone, before run $run:"
  "$build/bench/limiter-bench" hiccups --duration 3 | sed -n 's/^cpu/    cpu/p'
  taskset -c 0 "$build/server/limiterd" --policies "$here/flood_policies.yaml" \
    --listen 127.0.0.1:7621 --admin 127.0.0.1:7622 --threads 1 --max-keys 2000000 \
    --secret-file "$work/secret" > "$work/node.log" 2>&1 &
  node_pid=$!
  for _ in $(seq 50); do curl -sf 127.0.0.1:7622/metrics > /dev/null && break; sleep 0.1; done
  if [ "$rate" != 0 ]; then
    nice -n "$flood_nice" taskset -c 0 "$build/bench/limiter-bench" node \
      --server 127.0.0.1:7621 --policy cheap --keys 4000000 --rate "$rate" --batch 256 \
      --duration $((seconds + 28)) --secret-file "$work/secret" > "$work/flood.log" 2>&1 &
    flood_pid=$!
    sleep 14  # the warm-up burst
    # The flood alone for 4 s: what a frame of it costs the node.
    read -r frames0 busy0 <<< "$(frame_totals)"
    sleep 4
    read -r frames1 busy1 <<< "$(frame_totals)"
    awk -v f="$((frames1 - frames0))" -v b0="$busy0" -v b1="$busy1" 'BEGIN {
      printf "  flood alone: %d frames/s, %.0f us a frame on average\n",
        f / 4, f ? (b1 - b0) / f * 1e6 : 0 }'
  fi
  ops0=$(cheap_ops)
  cpu0=$(cpu_ticks "$node_pid")
  taskset -c 1 "$build/bench/limiter-bench" node --server 127.0.0.1:7621 --policy bench \
    --keys 10000 --rate 20000 --batch 1 --connections 1 --duration "$seconds" \
    --secret-file "$work/secret" > "$work/legit.log" 2>&1
  cpu1=$(cpu_ticks "$node_pid")
  ops1=$(cheap_ops)
  echo "run $run, flood $rate new keys/s (nice $flood_nice): $(grep -E '^node ' "$work/legit.log")"
  grep -E 'sends late' "$work/legit.log" || true
  echo "  flood while measured: $(((ops1 - ops0) / seconds)) ops/s; node CPU $(((cpu1 - cpu0) / seconds))%;" \
    "node $(grep VmRSS "/proc/$node_pid/status" | tr -s ' \t' ' ')"
  if [ -n "$flood_pid" ]; then
    kill "$flood_pid" 2>/dev/null || true
    wait "$flood_pid" 2>/dev/null || true
    flood_pid=""
  fi
  kill "$node_pid"
  wait "$node_pid" 2>/dev/null || true
  node_pid=""
done
