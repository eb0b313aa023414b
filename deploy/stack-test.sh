#!/usr/bin/env bash
# The compose stack end to end, as a test: builds the image (deploy/build-image.sh), brings up
# three nodes and the gateway, checks that each node has a data dir of its own, that the
# gateway, which holds the gateway secret alone, cannot drain a node, checks through the client
# library (limiterctl check --cluster) and through the gateway, restarts a node under load (it
# keeps its data dir), and tears everything down, leaving nothing running and no volume behind.
# Exits non-zero with a message at the first step that does not hold.
#   deploy/stack-test.sh        GATEWAY_PORT (default 18080) is the host port of the gateway
set -euo pipefail
cd "$(dirname "$0")/.."

PROJECT=limiterstack
export GATEWAY_PORT="${GATEWAY_PORT:-18080}"
URL="http://127.0.0.1:$GATEWAY_PORT"
log() { echo "stack-test: $*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

teardown() {
  # rm -v: the containers with their anonymous volumes (the image's VOLUME, the nodes' data
  # dirs), which podman-compose 1.0.3's down leaves behind, with -v too.
  podman ps -a --format '{{.Names}}' | grep "^${PROJECT}_" | xargs -r podman rm -f -v -t 1 >/dev/null 2>&1 || true
  podman-compose -p "$PROJECT" down >/dev/null 2>&1 || true
  podman network rm -f "${PROJECT}_default" >/dev/null 2>&1 || true
}
# The volume mounted at the data dir of container $1.
data_volume() {
  podman inspect --format '{{range .Mounts}}{{if eq .Destination "/var/lib/limiterd"}}{{.Name}}{{end}}{{end}}' "$1"
}

start=$(date +%s)
deploy/build-image.sh
teardown  # a stack left by an interrupted run
trap teardown EXIT
log "compose up"
podman-compose -p "$PROJECT" up -d limiterd gateway >/dev/null 2>&1 || fail "podman-compose up"

# The gateway answers once its members are resolved and a node is reachable.
for _ in $(seq 100); do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H 'X-Api-Key: warm' -H 'X-Tenant: warm' \
    "$URL/api/warm" || true)
  [ "$code" = 200 ] && break
  sleep 0.2
done
[ "$code" = 200 ] || fail "the gateway did not admit a request within 20 s (last status $code)"

in_gateway() { podman exec "${PROJECT}_gateway_1" bash -c "$1"; }
members='$(getent ahostsv4 limiterd | while read -r ip _; do echo $ip:7450; done | sort -u | paste -sd, -)'

# Three nodes on one ring: each adopts the member list its DNS answers give it (re-resolved
# every 5 s), so the nodes that started first converge within a refresh or two.
for _ in $(seq 60); do
  ring=$(in_gateway "limiterctl ring --json --secret-file /run/secrets/limiter_secret --cluster $members")
  nodes=$(grep -o '"state":"ok"' <<<"$ring" | wc -l)
  [ "$nodes" -eq 3 ] && break
  sleep 0.5
done
[ "$nodes" -eq 3 ] || fail "after 30 s, $nodes of 3 nodes have the ring: $ring"

# The gateway holds the gateway secret alone, so it cannot drain a node: limiterctl drain has
# no peer secret to make the admin token from, the gateway secret in its place makes a token the
# node refuses (403), and no token at all is refused too (401). The node keeps serving.
in_gateway 'test -s /run/secrets/limiter_secret && ! test -e /run/secrets/limiter_peer_secret &&
  ! test -e /run/secrets/limiter_key_seed' ||
  fail "the gateway container does not hold the gateway secret alone"
node_ip=$(in_gateway 'read -r ip _ < <(getent ahostsv4 limiterd) && echo "$ip"') ||
  fail "the gateway cannot resolve limiterd"
# admin_status METHOD PATH: the status code of node_ip's admin port, asked from the gateway
# ("" without an answer).
admin_status() {
  in_gateway "exec 3<>/dev/tcp/$node_ip/7451 && printf '$1 $2 HTTP/1.0\r\nContent-Length: 0\r\n\r\n' >&3 &&
    read -r _ code _ <&3 && echo \$code" 2>/dev/null || true
}
if out=$(in_gateway "limiterctl drain --admin $node_ip:7451" 2>&1); then
  fail "limiterctl drain without a peer secret drained $node_ip: $out"
fi
grep -q 'no peer secret' <<<"$out" || fail "limiterctl drain without a peer secret: $out"
if out=$(in_gateway "limiterctl drain --admin $node_ip:7451 --peer-secret-file /run/secrets/limiter_secret" 2>&1); then
  fail "the gateway secret drained $node_ip: $out"
fi
grep -q 'answered 403' <<<"$out" || fail "the gateway secret's token was not refused with 403: $out"
code=$(admin_status POST /drain)
[ "$code" = 401 ] || fail "POST /drain without a token answered '$code', not 401"
log "the gateway cannot drain node $node_ip (no peer secret; its own secret's token: 403; none: 401)"
# A drain makes the node unready at once; a node still taking the keys handed to it at its join
# is unready for a while (at most handoff_deadline).
for _ in $(seq 50); do
  code=$(admin_status GET /readyz)
  [ "$code" = 200 ] && break
  sleep 0.2
done
[ "$code" = 200 ] || fail "node $node_ip is not ready after the refused drains (/readyz '$code')"
ring=$(in_gateway "limiterctl ring --json --secret-file /run/secrets/limiter_secret --cluster $members")
nodes=$(grep -o '"state":"ok"' <<<"$ring" | wc -l)
[ "$nodes" -eq 3 ] || fail "after the refused drains, $nodes of 3 nodes have the ring: $ring"
for i in 1 2 3; do
  node_log=$(podman logs "${PROJECT}_limiterd_$i" 2>&1)
  if grep -q 'left the cluster' <<<"$node_log"; then
    fail "node $i left the cluster after the refused drains: $node_log"
  fi
  # The nodes read the key-id seed of their own (limiterd warns when it derives one).
  if grep -q 'no key-id seed' <<<"$node_log"; then
    fail "node $i has no key-id seed: $node_log"
  fi
done

# Each node has a data dir of its own (tenant_daily is durable): a volume per container, each
# holding a RocksDB database (its IDENTITY is made once, when the database is created).
volumes=()
for i in 1 2 3; do
  volume=$(data_volume "${PROJECT}_limiterd_$i")
  [ -n "$volume" ] || fail "node $i has no volume at /var/lib/limiterd"
  podman exec "${PROJECT}_limiterd_$i" test -s /var/lib/limiterd/IDENTITY ||
    fail "node $i has no database in /var/lib/limiterd"
  volumes+=("$volume")
done
[ "$(printf '%s\n' "${volumes[@]}" | sort -u | wc -l)" -eq 3 ] ||
  fail "the nodes share data volumes: ${volumes[*]}"
identity=$(podman exec "${PROJECT}_limiterd_2" cat /var/lib/limiterd/IDENTITY)
log "three data volumes, one database each"

# Through the client library: api_key (burst 200, 100/s) admits its burst and denies the rest.
check=$(in_gateway "limiterctl check --json --secret-file /run/secrets/limiter_secret \
  --cluster $members --policy-file /etc/limiter/policies.yaml --policy api_key --tenant acme \
  --key stack-test -n 400 --deadline-ms 1000")
log "limiterctl check: $check"
grep -q '"errors":0' <<<"$check" || fail "limiterctl check had errors: $check"
allowed=$(sed -n 's/.*"allowed":\([0-9]*\).*/\1/p' <<<"$check")
denied=$(sed -n 's/.*"denied":\([0-9]*\).*/\1/p' <<<"$check")
[ "$allowed" -ge 200 ] && [ "$denied" -ge 1 ] || fail "expected the burst admitted and the rest denied: $check"

# Through the gateway: reports cost 20 of api_key's burst of 200 (refilled at 100/s): 200s,
# then 429s with Retry-After.
report=(-H 'X-Api-Key: k1' -H 'X-Tenant: gw' -H 'X-Operation: report')
codes=$(for _ in $(seq 60); do
  curl -s -o /dev/null -w '%{http_code}\n' "${report[@]}" "$URL/api/orders"
done | sort | uniq -c)
log "gateway, 60 reports on one key: $(tr '\n' ' ' <<<"$codes")"
grep -qw 200 <<<"$codes" && grep -qw 429 <<<"$codes" || fail "expected 200s then 429s: $codes"
for _ in $(seq 20); do
  headers=$(curl -si "${report[@]}" "$URL/api/orders")
  grep -q '^HTTP/1.1 429' <<<"$headers" && break
done
grep -qi '^retry-after:' <<<"$headers" || fail "a 429 without Retry-After: $headers"

# A node restarted under load: every request is still answered (200 or 429, by the store or
# by fallback), none fails.
( for i in $(seq 150); do
    curl -s -o /dev/null -w '%{http_code}\n' -H "X-Api-Key: r$i" -H "X-Tenant: t$((i % 8))" \
      "$URL/api/orders"
    sleep 0.02
  done > /tmp/limiter-stack-restart.$$ ) &
load=$!
sleep 1
# -t 20: the node's SIGTERM hands its keys over first (handoff_deadline 10s); podman-compose
# 1.0.3 ignores the file's stop_grace_period.
podman restart -t 20 "${PROJECT}_limiterd_2" >/dev/null
wait "$load"
restart_codes=$(sort /tmp/limiter-stack-restart.$$ | uniq -c)
rm -f /tmp/limiter-stack-restart.$$
log "150 requests while node 2 restarted: $(tr '\n' ' ' <<<"$restart_codes")"
bad=$(awk '$2 != 200 && $2 != 429' <<<"$restart_codes")
[ -z "$bad" ] || fail "requests failed during the restart: $restart_codes"
# The restart was a hand-off, not a reset: the node left with its keys handed over, and came
# back by joining.
node_log=$(podman logs "${PROJECT}_limiterd_2" 2>&1)
leave_line=$(grep -m1 'left the cluster' <<<"$node_log") || fail "node 2 did not hand its keys over: $node_log"
log "node 2: ${leave_line#limiterd: }"
joined=""
for i in $(seq 50); do  # its second life's join line
  joins=$(podman logs "${PROJECT}_limiterd_2" 2>&1 | grep 'join:' || true)
  [ "$(wc -l <<<"$joins")" -ge 2 ] && joined=$(tail -1 <<<"$joins") && break
  sleep 0.2
done
[ -n "$joined" ] || fail "node 2 did not join again after its restart"
log "node 2: ${joined#limiterd: }"
# It came back to its own database, not a new one.
[ "$(data_volume "${PROJECT}_limiterd_2")" = "${volumes[1]}" ] ||
  fail "node 2's data volume changed across its restart"
[ "$(podman exec "${PROJECT}_limiterd_2" cat /var/lib/limiterd/IDENTITY)" = "$identity" ] ||
  fail "node 2's database was made anew across its restart"

teardown
trap - EXIT
left=$(podman ps -a --format '{{.Names}}' | grep -c "^${PROJECT}_" || true)
[ "$left" -eq 0 ] || fail "$left containers left after teardown"
for volume in "${volumes[@]}"; do
  ! podman volume exists "$volume" || fail "volume $volume left after teardown"
done
log "passed in $(( $(date +%s) - start )) s"
