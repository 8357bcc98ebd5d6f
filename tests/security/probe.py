# Knocks on every door of an instance, each on a connection of its own,
# and says which were shut (docs/protocol.md, "Who may call what").
# Usage: probe.py OUT DOORS TARGET_ID (--socket PATH | --bridge BATON NAME)
# DOORS is a JSON list of door names; OUT gets one JSON object per line:
# {"door": NAME, "shut": true|false, "answer": ...}.
import json
import socket
import subprocess
import sys

out_path, doors, target = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
how = sys.argv[4:]
HELLO = {"protocol_version": 1, "client": {"name": "probe", "version": "0"}}


class Conn:
    def __init__(self):
        if how[0] == "--socket":
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.settimeout(20)
            self.sock.connect(how[1])
            self.r = self.sock.makefile("rb")
            self.w = self.sock.makefile("wb")
            self.proc = None
        else:
            self.proc = subprocess.Popen(
                [how[1], "bridge", how[2]],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            self.r, self.w = self.proc.stdout, self.proc.stdin

    def write(self, data):
        self.w.write(data)
        self.w.flush()

    def call(self, i, method, params):
        req = {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
        self.write((json.dumps(req) + "\n").encode())
        while True:
            line = self.r.readline()
            if not line:
                return None
            v = json.loads(line)
            if v.get("id") == i:
                return v

    def close(self):
        if self.proc:
            self.proc.stdin.close()
            self.proc.wait(timeout=20)
        else:
            self.sock.close()


def knock(door):
    c = Conn()
    try:
        if door == "zcoder frame":
            payload = json.dumps(
                {"protocol": 1, "type": "enqueue", "message_id": "probe-z",
                 "target_instance_id": target, "body": "probe"}).encode()
            c.write(b"ZCODER-AGENT/1 %d\n" % len(payload) + payload)
            line = c.r.readline()
            body = c.r.read(int(line.split()[1])) if line.startswith(b"ZCODER") else line
            ack = json.loads(body) if body else None
            return ack is None or ack.get("status") != "accepted", ack
        hello = c.call(0, "initialize", HELLO)
        if door == "initialize":
            return hello is None or "error" in hello, hello
        if door == "events/subscribe (controller)":
            method, params = "events/subscribe", {"controller": True}
        else:
            method, params = door, {}
        v = c.call(1, method, params)
        shut = v is not None and v.get("error", {}).get("code") == -32012
        return shut, v
    finally:
        c.close()


with open(out_path, "w") as out:
    for door in doors:
        if door == "reply to approval/request":
            continue
        shut, answer = knock(door)
        out.write(json.dumps({"door": door, "shut": shut, "answer": answer}) + "\n")
        out.flush()
