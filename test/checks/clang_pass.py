#!/usr/bin/env python3
"""The clang pass of ./dev.sh test: every translation unit of a configured build, parsed by
clang++ with -Wthread-safety (the lock annotations of common/mutex.h checked) and the
project's warnings as errors. Syntax only: no code is generated, so it costs a fraction of a
build. Uses the build's compile_commands.json (the generated headers must exist: run it after
the build).

  clang_pass.py BUILD_DIR [-j N] [--clang clang++] [FILTER...]

FILTER: only units whose path contains one of them. Exit status 1 when any unit fails; each
failure is printed with clang's diagnostics.
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys
import time

# GCC's options that clang does not know, or that mean something else to it.
GCC_ONLY = {"-Wno-restrict", "-Wno-maybe-uninitialized", "-fno-semantic-interposition"}


def clang_command(entry, clang):
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    # The build's launcher (env CCACHE_BASEDIR=... ccache) and compiler go.
    while args and (args[0] == "env" or "=" in args[0] or args[0].endswith("ccache")):
        args.pop(0)
    args.pop(0)  # the compiler
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a in ("-o", "-MF", "-MT", "-MQ"):
            i += 2
            continue
        if a in ("-c", "-MD", "-MMD") or a in GCC_ONLY:
            i += 1
            continue
        out.append(a)
        i += 1
    return [clang, "-fsyntax-only", "-Wthread-safety", "-Wthread-safety-beta",
            "-Wno-unknown-warning-option"] + out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir")
    parser.add_argument("-j", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--clang", default="clang++")
    parser.add_argument("filters", nargs="*")
    a = parser.parse_args()
    path = os.path.join(a.build_dir, "compile_commands.json")
    try:
        with open(path) as f:
            entries = json.load(f)
    except OSError as e:
        sys.exit(f"clang_pass: {path}: {e.strerror}; configure and build {a.build_dir} first")
    entries = [e for e in entries if e["file"].endswith((".cc", ".cpp"))]
    if a.filters:
        entries = [e for e in entries if any(x in e["file"] for x in a.filters)]
    started = time.time()

    def check(entry):
        cmd = clang_command(entry, a.clang)
        r = subprocess.run(cmd, cwd=entry["directory"], capture_output=True, text=True)
        return entry["file"], r.returncode, r.stderr

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.j) as pool:
        for file, code, err in pool.map(check, entries):
            if code != 0:
                failed += 1
                print(f"clang_pass: {file}:\n{err}", file=sys.stderr)
    print(f"clang_pass: {len(entries) - failed} of {len(entries)} units clean "
          f"(-Wthread-safety -Werror, syntax only) in {time.time() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
