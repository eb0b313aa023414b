#!/usr/bin/env bash
# Builds the limiter image (localhost/limiter:dev) with podman on a Debian 12 machine with no
# registry: installs podman and friends, makes the base image with debootstrap once
# (localhost/debian:bookworm, cached), configures podman (runc, ulimits), then builds the
# repo's Dockerfile. Idempotent; run as root. Also creates the compose stack's credentials when
# they are missing (git-ignored by deploy/.gitignore): deploy/compose-secret, the gateway
# secret, and deploy/compose-peer-secret and deploy/compose-key-seed, the peer secret and the
# key-id seed, which docker-compose.yml gives the nodes only.
#   deploy/build-image.sh            IMAGE=... BASE_IMAGE=... to change the names
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE="${IMAGE:-localhost/limiter:dev}"
BASE_IMAGE="${BASE_IMAGE:-localhost/debian:bookworm}"
PACKAGES=(podman buildah podman-compose debootstrap runc netavark aardvark-dns
          containernetworking-plugins uidmap fuse-overlayfs slirp4netns docker-compose)

log() { echo "build-image: $*" >&2; }

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# crun cannot start containers here (hybrid cgroups, no systemd), and podman asks for more
# rlimits than the hard limits allow: runc, and ulimits no higher than this machine's.
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
[ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
conf=$(printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n\n[engine]\nruntime = "runc"\n' \
  "$nofile" "$nofile" "$nproc" "$nproc")
if [ "$(cat /etc/containers/containers.conf 2>/dev/null)" != "$conf" ]; then
  log "writing /etc/containers/containers.conf (runc, nofile=$nofile, nproc=$nproc)"
  mkdir -p /etc/containers
  printf '%s\n' "$conf" > /etc/containers/containers.conf
fi

# The base image, made once: debootstrap from the mirror apt itself uses.
if ! podman image exists "$BASE_IMAGE"; then
  mirror=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    # deb822: the URIs of the stanza whose Suites include plain "bookworm"
    mirror=$(awk '/^URIs:/{u=$2} /^Suites:/{for(i=2;i<=NF;i++) if($i=="bookworm") {print u; exit}}' \
      /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
    mirror=$(awk '$1=="deb" && $3=="bookworm" {print $2; exit}' /etc/apt/sources.list)
  fi
  [ -n "$mirror" ] || { log "no bookworm mirror in apt's sources"; exit 1; }
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
  log "debootstrap bookworm from $mirror"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
  tar -C "$root" -c . | podman import - "$BASE_IMAGE" >/dev/null
  rm -rf "$root"
  trap - EXIT
fi

# new_credential FILE WHAT: 32 random bytes in hex on one line, unless FILE has one already.
# The key-id seed is made once and kept: a new one would change every key id (the nodes' durable
# keys would start fresh).
new_credential() {
  [ -s "$1" ] && return 0
  log "writing $1 ($2 for the compose stack)"
  (umask 022; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$1"; echo >> "$1")
}
new_credential deploy/compose-secret "a new gateway secret"
new_credential deploy/compose-peer-secret "a new peer secret"
new_credential deploy/compose-key-seed "a new key-id seed"
if cmp -s deploy/compose-secret deploy/compose-peer-secret; then
  log "deploy/compose-peer-secret is the gateway secret (deploy/compose-secret): limiterd refuses that; remove it and run again"
  exit 1
fi
# Bind-mounted as compose secrets, they are read inside by uid 65532: readable by all (a local
# stack's; a real deployment mounts its own with the right owner). Each container sees only
# the secrets its service lists.
chmod 644 deploy/compose-secret deploy/compose-peer-secret deploy/compose-key-seed

# --format docker keeps the HEALTHCHECK (the OCI format has none).
start=$(date +%s)
podman build --format docker --build-arg "BASE=$BASE_IMAGE" -t "$IMAGE" .
log "built $IMAGE in $(( $(date +%s) - start )) s, $(podman image inspect --format '{{.Size}}' "$IMAGE") bytes"
