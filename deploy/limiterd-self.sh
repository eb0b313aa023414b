#!/bin/bash
# limiterd as a member of a cluster found by DNS (compose, members_dns): --self is this
# container's own address, known only once it runs. LIMITER_SELF_PORT: the data port (7450).
set -euo pipefail
read -r ip _ < <(getent ahostsv4 "$HOSTNAME") || true
if [ -z "${ip:-}" ]; then
  echo "limiterd-self: cannot resolve this container's hostname '$HOSTNAME'" >&2
  exit 1
fi
exec /usr/local/bin/limiterd --self "$ip:${LIMITER_SELF_PORT:-7450}" "$@"
