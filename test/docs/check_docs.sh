#!/usr/bin/env bash
# The docs, checked against the binaries of a build.
#
# 1. Every `console` block marked `<!-- checked -->` in README.md and docs/**/*.md is run. A
#    line starting with `$ ` is a command (a trailing `\` continues it on the next line); the
#    other lines under it are what it prints: each must appear in the page's output from that
#    command on (`…` matches anything), waiting up to EXPECT_SECONDS for output from background
#    processes. The commands of one page run in one bash, in order, from a copy of the checkout's
#    top folder whose build/ holds the binaries given below, with those binaries on PATH. Each
#    page runs in namespaces of its own (network, mount, pid, and a /proc of that pid
#    namespace, which the sanitizers' leak check reads at exit): loopback only, so the docs'
#    fixed ports are free; a private /tmp; and every process the page started ends with it. A
#    command that exits non-zero, a line that never appears, or a page that runs past
#    PAGE_SECONDS fails the check, naming the page, the line and the command.
# 2. The reference pages name what the binaries have: every flag of `limiterd --help`, every
#    field its config file takes (from limiterd's own "unknown field (known: ...)" message),
#    every policy-file field, every limiterctl subcommand and option, every limiter-gateway flag,
#    every limiter-bench subcommand, and every metric family a node serves on /metrics (a node
#    with a data dir and a region, started here); and every metric metrics.md names is served.
#
# Usage (as root: namespaces need it; ctest runs it as docs_commands, see CMakeLists.txt):
#   test/docs/check_docs.sh --source DIR --work DIR --limiterd BIN --limiterctl BIN
#       --limiter-gateway BIN --limiter-bench BIN [--gateway-example BIN] [--only PAGE]...
set -uo pipefail

PAGE_SECONDS=${PAGE_SECONDS:-120}
EXPECT_SECONDS=${EXPECT_SECONDS:-20}

source_dir="" work="" limiterd="" limiterctl="" gateway="" bench="" example="" mode=""
page_dir="" only=()
while (($#)); do
  case "$1" in
    --source) source_dir=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --limiterd) limiterd=$2; shift 2 ;;
    --limiterctl) limiterctl=$2; shift 2 ;;
    --limiter-gateway) gateway=$2; shift 2 ;;
    --limiter-bench) bench=$2; shift 2 ;;
    --gateway-example) example=$2; shift 2 ;;
    --only) only+=("$2"); shift 2 ;;
    --inner-page) mode=page; page_dir=$2; shift 2 ;;
    --inner-reference) mode=reference; shift ;;
    *) echo "check_docs.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

# Inside a page's namespaces: loopback up, a private /tmp.
enter_namespace() {
  ip link set lo up || { echo "FAIL cannot bring up lo in the test's network namespace"; exit 1; }
  mount -t tmpfs -o size=512m tmpfs /tmp || { echo "FAIL cannot mount a private /tmp"; exit 1; }
}

# A line of the docs as an extended regex: literal, except `…`, which matches anything.
line_regex() {
  printf '%s' "$1" | LC_ALL=C sed -e 's/[][\.*^$?+(){}|/]/\\&/g' -e 's/…/.*/g'
}

# ---------------------------------------------------------------------------------------------
# One page's commands, in its namespaces. $page_dir holds cmd.N (the command), exp.N (the lines
# it prints) and where.N (FILE:LINE); failures go to stdout, the page's output to terminal.log.
if [ "$mode" = page ]; then
  enter_namespace
  cd "$work/checkout" || exit 1
  export PATH="$work/checkout/build/server:$work/checkout/build/client/ctl:$PATH"
  log=$page_dir/terminal.log
  : >"$log"
  exec 3>&1 </dev/null >>"$log" 2>&1
  set +euo pipefail  # the commands run as in a reader's shell
  trap 'exit 124' TERM  # the page's time is up (timeout signals the whole group)
  n=1
  while [ -f "$page_dir/cmd.$n" ]; do
    cmd=$(<"$page_dir/cmd.$n")
    where=$(<"$page_dir/where.$n")
    printf '%s\n' "$where: \`$cmd\`" >"$page_dir/progress"
    offset=$(stat -c %s "$log")
    eval "$cmd" 3>&-
    rc=$?
    if [ "$rc" -ne 0 ]; then
      {
        echo "FAIL $where: \`$cmd\` exited with status $rc. It printed:"
        tail -c +"$((offset + 1))" "$log" | head -c 4000 | sed 's/^/    /'
      } >&3
      exit 1
    fi
    while IFS= read -r expected; do
      re=$(line_regex "$expected")
      deadline=$((SECONDS + EXPECT_SECONDS))
      until tail -c +"$((offset + 1))" "$log" | LC_ALL=C grep -qE -- "$re"; do
        if ((SECONDS >= deadline)); then
          {
            echo "FAIL $where: \`$cmd\` should print"
            echo "    $expected"
            echo "  but in $EXPECT_SECONDS s the page printed from it on:"
            tail -c +"$((offset + 1))" "$log" | head -c 4000 | sed 's/^/    /'
          } >&3
          exit 1
        fi
        sleep 0.1
      done
    done <"$page_dir/exp.$n"
    n=$((n + 1))
  done
  exit 0
fi

# ---------------------------------------------------------------------------------------------
# The reference pages against the binaries, in namespaces of their own (a node is started).
if [ "$mode" = reference ]; then
  enter_namespace
  ref=$source_dir/docs/reference
  failed=0
  fail() { echo "FAIL $*"; failed=1; }
  # `$2` (backticked) must appear in reference page $1.
  names() {
    grep -qF -- "\`$2\`" "$ref/$1" || fail "docs/reference/$1 does not name \`$2\` ($3)"
  }
  # The fields limiterd lists when a file has an unknown one: $1 is the file's text, $2 the
  # flag that reads it.
  known_fields() {
    printf '%b' "$1" >/tmp/fields.yaml
    "$limiterd" "$2" /tmp/fields.yaml 2>&1 | sed -n 's/.*unknown field (known: \(.*\))$/\1/p' |
      tr ',' '\n' | tr -d ' '
  }
  check_fields() {  # page, file text, flag, prefix, what
    local fields f
    fields=$(known_fields "$2" "$3")
    [ -n "$fields" ] || { fail "limiterd $3 with '$2' no longer lists the known fields"; return; }
    for f in $fields; do names "$1" "$4$f" "$5"; done
  }

  # limiterd: flags, both ways.
  flags=$("$limiterd" --help | grep -oE '^ +(-h,)?--[a-z0-9-]+' | sed 's/.*--/--/')
  [ -n "$flags" ] || fail "limiterd --help printed no flags"
  for f in $flags; do names limiterd.md "$f" "a flag of limiterd --help"; done
  for f in $(grep -oE '^\| `--[a-z0-9-]+`' "$ref/limiterd.md" | tr -d '|` '); do
    grep -qx -- "$f" <<<"$flags" || fail "docs/reference/limiterd.md lists $f, which limiterd --help does not have"
  done
  # limiterd's config file.
  check_fields limiterd.md 'no_such_field: 1\n' --config "" "a field of limiterd's config file"
  check_fields limiterd.md 'hot_keys: {no_such_field: 1}\n' --config hot_keys. "a field of hot_keys"
  check_fields limiterd.md 'tls: {no_such_field: 1}\n' --config tls. "a field of tls"
  check_fields limiterd.md 'regions: [{no_such_field: 1}]\n' --config regions. "a field of regions"
  # The policy file.
  p='policies:\n  - {name: p, limit: 1, window: 1s'
  check_fields policy-file.md 'no_such_field: []\n' --policies "" "a field of the policy file"
  check_fields policy-file.md "$p, no_such_field: 1}\n" --policies "" "a field of a policy"
  check_fields policy-file.md "$p, class: contract, lease: {no_such_field: 1}}\n" --policies lease. \
    "a field of lease"
  for class in security contract capacity; do
    check_fields policy-file.md "$p, class: $class, fallback: {no_such_field: 1}}\n" --policies \
      fallback. "a field of a $class policy's fallback"
  done

  # limiterctl: its options, every subcommand (a section of its own) and their options.
  options() { sed -n '/^Options:/,/^$/p' | grep -oE '^ +(-h,)?-[-a-z0-9]+' | sed 's/.*,//; s/^ *//'; }
  for f in $("$limiterctl" --help | options); do names limiterctl.md "$f" "an option of limiterctl"; done
  subcommands=$("$limiterctl" --help | sed -n '/^Subcommands:/,$p' | sed -n 's/^  \([a-z-]*\) .*/\1/p')
  [ -n "$subcommands" ] || fail "limiterctl --help printed no subcommands"
  for s in $subcommands; do
    grep -qx "## $s" "$ref/limiterctl.md" || fail "docs/reference/limiterctl.md has no section '## $s' (a limiterctl subcommand)"
    for f in $("$limiterctl" "$s" --help | options); do
      names limiterctl.md "$f" "an option of limiterctl $s"
    done
  done
  # limiter-gateway's flags; limiter-bench's subcommands.
  for f in $("$gateway" --help | options); do names limiter-gateway.md "$f" "a flag of limiter-gateway"; done
  for s in $("$bench" --help | sed -n '/^Subcommands:/,$p' | sed -n 's/^  \([a-z-]*\) .*/\1/p'); do
    names limiter-bench.md "$s" "a limiter-bench subcommand"
  done

  # The metrics of a node with a data dir and a region, both ways.
  cat >/tmp/node.yaml <<EOF
listen: 127.0.0.1:7450
admin: 127.0.0.1:7451
policies: $source_dir/examples/policies.yaml
data_dir: /tmp/node-data
self: 127.0.0.1:7450
members: [127.0.0.1:7450]
region: here
regions:
  - {name: there, members: [127.0.0.1:7460]}
EOF
  "$limiterd" --config /tmp/node.yaml >/tmp/node.log 2>&1 &
  metrics=""
  for _ in $(seq 200); do
    metrics=$(curl -sf 127.0.0.1:7451/metrics) && break
    sleep 0.1
  done
  if [ -z "$metrics" ]; then
    fail "a node did not serve /metrics within 20 s; it printed: $(head -c 2000 /tmp/node.log)"
  else
    served=$(sed -n 's/^# TYPE \([a-z_]*\) .*/\1/p' <<<"$metrics")
    for m in $served; do names metrics.md "$m" "a metric a node serves"; done
    for m in $(grep -oE '^\| `[a-z_]+`' "$ref/metrics.md" | tr -d '|` '); do
      grep -qx -- "$m" <<<"$served" || fail "docs/reference/metrics.md lists $m, which a node does not serve"
    done
  fi
  exit "$failed"
fi

# ---------------------------------------------------------------------------------------------
# The driver.
die() { echo "check_docs.sh: $*" >&2; exit 2; }
[ -n "$source_dir" ] && [ -n "$work" ] && [ -n "$limiterd" ] && [ -n "$limiterctl" ] &&
  [ -n "$gateway" ] && [ -n "$bench" ] || die "give --source, --work, --limiterd, --limiterctl, --limiter-gateway and --limiter-bench"
for bin in "$limiterd" "$limiterctl" "$gateway" "$bench" ${example:+"$example"}; do
  [ -x "$bin" ] || die "$bin is not an executable"
done
[ "$(id -u)" -eq 0 ] || die "needs root, for the namespaces each page runs in (unshare, mount)"
for tool in unshare ip curl openssl; do
  command -v "$tool" >/dev/null || die "needs $tool"
done
source_dir=$(cd "$source_dir" && pwd) || die "no --source $source_dir"
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

# A copy of the checkout's top folder: links to everything in it, and build/ with the binaries.
case "$(realpath -m "$work")" in / | "$source_dir" | "$source_dir"/docs*) die "--work $work would remove what it checks" ;; esac
rm -rf "$work" && mkdir -p "$work/checkout" || die "cannot make $work"
work=$(cd "$work" && pwd)
case "$work/" in /tmp/*) die "--work must not be under /tmp, which each page gets a private one of" ;; esac
for entry in "$source_dir"/* "$source_dir"/.[!.]*; do
  case "$(basename "$entry")" in build* | .git | .cache | '.[!.]*') continue ;; esac
  ln -s "$entry" "$work/checkout/"
done
mkdir -p "$work/checkout/build/"{server,client/ctl,examples,bench}
ln -s "$limiterd" "$work/checkout/build/server/limiterd"
ln -s "$limiterctl" "$work/checkout/build/client/ctl/limiterctl"
ln -s "$gateway" "$work/checkout/build/examples/limiter-gateway"
ln -s "$bench" "$work/checkout/build/bench/limiter-bench"
[ -n "$example" ] && ln -s "$example" "$work/checkout/build/examples/gateway_example"

namespaced() {
  timeout -k 5 "$PAGE_SECONDS" unshare --net --mount --pid --fork --mount-proc --kill-child \
    --propagation private bash "$self" "$@"
}

failed=0
pages=("${only[@]}")
if ((${#pages[@]} == 0)); then
  mapfile -t pages < <(cd "$source_dir" && { echo README.md; find docs -name '*.md' | LC_ALL=C sort; })
fi

# Cuts each page's checked blocks into commands and the lines they print.
checked_pages=0 checked_commands=0
for page in "${pages[@]}"; do
  dir=$work/pages/${page//\//_}
  mkdir -p "$dir"
  n=0 state=text lineno=0 continued=0
  while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    case $state in
      text)
        [[ $line == '<!-- checked'* ]] && state=marked && marked_at=$lineno ;;
      marked)
        if [[ $line == '```console' ]]; then
          state=block
        else
          echo "FAIL $page:$marked_at: <!-- checked --> is not followed by a \`\`\`console block"
          failed=1 state=text
        fi ;;
      block)
        if ((continued)); then
          printf '\n%s' "$line" >>"$dir/cmd.$n"
          [[ $line == *'\' ]] || continued=0
        elif [[ $line == '```' ]]; then
          state=text
        elif [[ $line == '$ '* ]]; then
          n=$((n + 1))
          printf '%s' "${line#\$ }" >"$dir/cmd.$n"
          : >"$dir/exp.$n"
          echo "$page:$lineno" >"$dir/where.$n"
          [[ $line == *'\' ]] && continued=1
        elif [[ -n ${line// /} ]]; then
          if ((n == 0)); then
            echo "FAIL $page:$lineno: a checked block shows output before any \`$ \` command"
            failed=1
          else
            printf '%s\n' "$line" >>"$dir/exp.$n"
          fi
        fi ;;
    esac
  done <"$source_dir/$page"
  [ "$state" = text ] || { echo "FAIL $page: a checked block is not closed"; failed=1; }
  ((n > 0)) || continue
  checked_pages=$((checked_pages + 1)) checked_commands=$((checked_commands + n))
  started=$SECONDS
  namespaced --inner-page "$dir" --work "$work"
  rc=$?
  if ((rc == 124 || rc == 137)); then
    echo "FAIL $page: not done in $PAGE_SECONDS s; it was running $(cat "$dir/progress" 2>/dev/null)"
    echo "  the page printed (last 2000 bytes):"
    tail -c 2000 "$dir/terminal.log" 2>/dev/null | sed 's/^/    /'
    failed=1
  elif ((rc != 0)); then
    failed=1
  else
    echo "ok $page: $n commands in $((SECONDS - started)) s"
  fi
done
((checked_pages > 0)) || { echo "FAIL no page has a checked block"; failed=1; }

if ((${#only[@]} == 0)); then
  namespaced --inner-reference --source "$source_dir" --limiterd "$limiterd" \
    --limiterctl "$limiterctl" --limiter-gateway "$gateway" --limiter-bench "$bench"
  rc=$?
  ((rc == 0)) && echo "ok docs/reference: every flag, field, subcommand and metric named" || failed=1
fi
echo "$checked_commands commands on $checked_pages pages$( ((failed)) && echo ': FAILED')"
exit "$failed"
