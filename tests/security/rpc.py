# One JSON-RPC call on an instance's socket, after initialize; prints the
# answer as one JSON line (null when the connection ended first).
# Usage: rpc.py SOCKET METHOD PARAMS_JSON
import json
import socket
import sys

s = socket.socket(socket.AF_UNIX)
s.settimeout(20)
s.connect(sys.argv[1])
r, w = s.makefile("rb"), s.makefile("wb")


def call(i, method, params):
    req = {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
    w.write((json.dumps(req) + "\n").encode())
    w.flush()
    while True:
        line = r.readline()
        if not line:
            return None
        v = json.loads(line)
        if v.get("id") == i:
            return v


call(0, "initialize", {"protocol_version": 1, "client": {"name": "rpc", "version": "0"}})
print(json.dumps(call(1, sys.argv[2], json.loads(sys.argv[3]))))
