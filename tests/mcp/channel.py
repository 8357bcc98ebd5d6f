"""A real MCP client sees the channel push of `baton mcp` (issue 20).

tests/mcp/channel.rs runs this with the Python `mcp` SDK, in the private
world of its test (BATON_DIR, XDG_STATE_HOME, HOME and TMPDIR come from
the environment and are passed on to the server):

    python3 tests/mcp/channel.py BATON WORKSPACE NAME WAITING_ID...

It starts `baton mcp --name NAME` in WORKSPACE, where the tasks
WAITING_ID... wait in the spool, and initializes a session. The SDK hands
its message handler only the notifications it knows, and drops
`notifications/claude/channel` (a method of no MCP revision), so the
script reads the wire itself: both streams between the SDK and the
server's pipes go through a tee that records every message, in order, with
its direction ("out" to the server, "in" from it). A message is recorded
before it is passed on, so anything the server sent because of an "out"
message comes after it in the record.

Steps: wait until every waiting task was pushed; send one more task with
`baton send NAME` and wait for its push; take and finish each task with
check_inbox and complete_task; wait QUIET seconds for pushes that must not
come; print one JSON object: the initialize result, the record, what the
SDK's message handler got, the tool results. tests/mcp/channel.rs decides
whether they are right; the script exits non-zero only when a step cannot
be taken (a wait ran out, the server did not start). Every wait is
bounded.
"""

import asyncio
import json
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

# The longest any single wait may take, in seconds.
STEP = 20
# How long pushes that must not come are waited for, in seconds: far
# longer than one takes to arrive (milliseconds).
QUIET = 2
CHANNEL = "notifications/claude/channel"
LIVE = "Live task: say hello."


def wire(model):
    """An SDK object in the form it has on the wire."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def env():
    keep = ("BATON_DIR", "XDG_STATE_HOME", "HOME", "TMPDIR", "LANG", "PATH")
    return {k: os.environ[k] for k in keep if k in os.environ}


def pushed(record, mid):
    """The channel notifications in the record that name task `mid`."""
    return [
        m
        for d, m in record
        if d == "in"
        and m.get("method") == CHANNEL
        and m.get("params", {}).get("meta", {}).get("message_id") == mid
    ]


async def until(what, probe):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STEP
    while not probe():
        if loop.time() > deadline:
            raise TimeoutError(f"waited {STEP} s for {what}")
        await asyncio.sleep(0.02)


def tee(tg, record):
    """Two pumps: server -> SDK and SDK -> server, each recording what
    passes. Returns the streams to give the SDK."""

    def inbound(src):
        send, recv = anyio.create_memory_object_stream(0)

        async def pump():
            async with send:
                async for item in src:
                    if not isinstance(item, Exception):
                        record.append(["in", wire(item.message)])
                    await send.send(item)

        tg.start_soon(pump)
        return recv

    def outbound(dst):
        send, recv = anyio.create_memory_object_stream(0)

        async def pump():
            async with recv:
                async for item in recv:
                    record.append(["out", wire(item.message)])
                    await dst.send(item)

        tg.start_soon(pump)
        return send

    return inbound, outbound


async def baton_send(baton, name, body):
    proc = await asyncio.create_subprocess_exec(
        baton,
        "send",
        name,
        body,
        "--json",
        env=env(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), STEP)
    return json.loads(out)


async def main(baton, workspace, name, waiting):
    out = {"record": [], "sdk_notes": [], "faults": []}
    record = out["record"]

    async def on_message(message):
        if isinstance(message, Exception):
            out["faults"].append(repr(message))
        else:
            out["sdk_notes"].append(wire(message))

    params = StdioServerParameters(
        command=baton, args=["mcp", "--name", name], env=env(), cwd=workspace
    )
    async with stdio_client(params) as (read, write):
        async with anyio.create_task_group() as tg:
            inbound, outbound = tee(tg, record)
            async with ClientSession(
                inbound(read), outbound(write), message_handler=on_message
            ) as s:
                # The SDK sends notifications/initialized last in initialize().
                out["initialize"] = wire(await s.initialize())
                for mid in waiting:
                    await until(f"the push of {mid}", lambda m=mid: pushed(record, m))
                sent = await baton_send(baton, name, LIVE)
                out["send"] = sent
                live = sent["message_id"]
                await until("the push of the live task", lambda: pushed(record, live))
                out["claims"], out["completes"] = [], []
                for _ in range(len(waiting) + 1):
                    claim = wire(await s.call_tool("check_inbox", {}))
                    out["claims"].append(claim)
                    mid = claim.get("structuredContent", {}).get("message_id")
                    done = await s.call_tool("complete_task", {"message_id": mid})
                    out["completes"].append(wire(done))
                await asyncio.sleep(QUIET)
                await s.send_ping()
            tg.cancel_scope.cancel()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit("usage: channel.py BATON WORKSPACE NAME WAITING_ID...")
    baton, workspace, name, *waiting = sys.argv[1:]
    asyncio.run(asyncio.wait_for(main(baton, workspace, name, waiting), 8 * STEP))
