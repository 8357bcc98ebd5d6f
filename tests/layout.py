# `make layout`: writes src/layout.ld, the list of functions an instance
# runs from its start to idle with watchers, so that the linker puts them
# next to each other (docs/performance.md, "Idle RSS: the code's layout").
# Usage: layout.py BINARY OUT. BINARY is a build of the release profile
# (which keeps the symbols); valgrind (callgrind) and nm must be installed.
#
# The instance runs under callgrind in a private registry and state
# directory: it starts, 10 watchers attach (initialize, events/subscribe),
# `baton status` and three `baton send`s reach it, and it is stopped by
# its pid. Every function callgrind saw run that is a function of BINARY
# goes in the list, twice: by its exact name (this toolchain and this
# Cargo.lock), then with its hash left open (`17h*E`, and `Cs*_` for a
# crate's disambiguator), for builds whose hashes differ.
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

BOUND = 300  # seconds: valgrind runs the instance some 50 times slower


def wait_for(what, check):
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    sys.exit(f"layout.py: timed out waiting for {what}")


def call(f, i, method, params):
    req = {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
    f.write((json.dumps(req) + "\n").encode())
    f.flush()
    answer = json.loads(f.readline())
    if "result" not in answer:
        sys.exit(f"layout.py: {method} answered {answer}")


def profile(binary, root):
    reg = os.path.join(root, "reg")
    ws = os.path.join(root, "ws")
    os.mkdir(reg, 0o700)
    os.mkdir(ws)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": root,
        "BATON_DIR": reg,
        "XDG_STATE_HOME": os.path.join(root, "state"),
        "LANG": "C.UTF-8",
    }
    out = os.path.join(root, "callgrind.out")
    serve = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--demangle=no",
         f"--callgrind-out-file={out}",
         binary, "serve", "--name", "idle", "--workspace", ws],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(root, "serve.err"), "wb"))
    watchers = []
    try:
        sock = wait_for("the instance's socket", lambda: next(
            (os.path.join(reg, f) for f in os.listdir(reg) if f.endswith(".sock")),
            None))
        for _ in range(10):
            c = socket.socket(socket.AF_UNIX)
            c.settimeout(BOUND)
            wait_for("a connection", lambda: c.connect_ex(sock) == 0)
            f = c.makefile("rwb")
            hello = {"protocol_version": 1, "client": {"name": "layout", "version": "1"}}
            call(f, 0, "initialize", hello)
            call(f, 1, "events/subscribe", {})
            watchers.append(c)
        run = lambda *a: subprocess.run([binary, *a], env=env, check=True,
                                        stdout=subprocess.DEVNULL, timeout=BOUND)
        run("status", "idle")
        for i in range(3):
            run("send", "idle", f"task {i}")
    finally:
        for c in watchers:
            c.close()
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(BOUND)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
    ran = set()
    with open(out) as f:
        for line in f:
            m = re.match(r"c?fn=\(\d+\) (.+)$", line)
            if m:
                ran.add(m.group(1))
    return ran


def open_hash(name):
    name = re.sub(r"17h[0-9a-f]{16}E$", "17h*E", name)
    if name.startswith("_R"):
        name = re.sub(r"Cs[0-9A-Za-z]*_", "Cs*_", name)
    return name


def main():
    binary, out = sys.argv[1], sys.argv[2]
    nm = subprocess.run(["nm", "--defined-only", binary], check=True,
                        capture_output=True, text=True).stdout
    text = {p[2] for p in (l.split() for l in nm.splitlines())
            if len(p) == 3 and p[1] in "tT"}
    if not text:
        sys.exit(f"layout.py: {binary} has no symbols (the release profile keeps them: strip = 'debuginfo')")
    root = tempfile.mkdtemp(prefix="baton-layout-")
    try:
        ran = sorted(profile(binary, root) & text)
    finally:
        shutil.rmtree(root)
    lines, seen = [], set()
    for name in ran + [open_hash(n) for n in ran]:
        if name not in seen:
            seen.add(name)
            lines.append(f"    *(.text.{name} .text.unlikely.{name})\n")
    with open(out, "w") as f:
        f.write("/* The functions an instance runs from its start to idle with\n"
                "   watchers, next to each other: the kernel maps a binary's code\n"
                "   in 64 KiB windows. Written by `make layout` (tests/layout.py);\n"
                "   docs/performance.md, \"Idle RSS: the code's layout\". */\n"
                "SECTIONS\n{\n  .text.baton_idle : {\n")
        f.writelines(lines)
        f.write("  }\n}\nINSERT BEFORE .text;\n")
    print(f"layout.py: {len(ran)} functions, {len(lines)} patterns in {out}")


main()
