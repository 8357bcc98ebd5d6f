"""Two `baton mcp` sessions hand a task over through a real MCP client.

tests/mcp.rs runs this with the Python `mcp` SDK, in the private world of
its test (BATON_DIR, XDG_STATE_HOME, HOME and TMPDIR come from the
environment and are passed on to both servers):

    python3 tests/mcp/session.py BATON WORKSPACE_A WORKSPACE_B THIRD_ID

Session A is `baton mcp --name alpha` in WORKSPACE_A and session B is
`baton mcp --name beta` in WORKSPACE_B; THIRD_ID is the instance id of a
third instance the test runs. The script takes each step a host would
take and prints one JSON object on stdout: every answer it got, in wire
form (camelCase, as the server sent it), and the log notifications session
B received. tests/mcp.rs decides whether they are right; this script
exits non-zero only when a step cannot be taken at all (a wait ran out, a
server did not start). The SDK stops both servers when their sessions
close: it closes their stdin, and terminates them if they linger.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp import types
from mcp.client.stdio import stdio_client

# The longest any single wait may take, in seconds.
STEP = 20

TASK = "Run the unit tests in your workspace and tell me how many pass."
REPLY = "All 12 unit tests pass."


def wire(model):
    """An SDK result in the form the server sent it."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def server(baton, workspace, name):
    # Only what baton needs; the SDK adds HOME and PATH of this process,
    # which are the test's own.
    keep = ("BATON_DIR", "XDG_STATE_HOME", "HOME", "TMPDIR", "LANG", "PATH")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    return StdioServerParameters(
        command=baton, args=["mcp", "--name", name], env=env, cwd=workspace
    )


async def until(what, probe):
    """Calls `probe` until it returns something, for at most STEP seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STEP
    while True:
        got = await probe()
        if got is not None:
            return got
        if loop.time() > deadline:
            raise TimeoutError(f"waited {STEP} s for {what}")
        await asyncio.sleep(0.05)


async def rpc_error(call):
    """The JSON-RPC error a call ends with, or None if it succeeds."""
    try:
        await call
    except Exception as e:  # the SDK's McpError (1.x) or MCPError (2.x)
        err = getattr(e, "error", None)
        return {
            "code": getattr(err, "code", None),
            "message": getattr(err, "message", str(e)),
        }
    return None


def agent(listing, key, value):
    for a in listing["structuredContent"]["agents"]:
        if a.get(key) == value:
            return a
    raise LookupError(f"no agent with {key} {value!r} in {listing}")


async def main(baton, ws_a, ws_b, third):
    # The revision the SDK asks for in initialize.
    out = {"asked": types.LATEST_PROTOCOL_VERSION}
    logs = []

    async def on_log(params):
        logs.append(wire(params))

    async with stdio_client(server(baton, ws_a, "alpha")) as (ra, wa), stdio_client(
        server(baton, ws_b, "beta")
    ) as (rb, wb):
        async with ClientSession(ra, wa) as a, ClientSession(
            rb, wb, logging_callback=on_log
        ) as b:
            out["initialize_a"] = wire(await a.initialize())
            out["initialize_b"] = wire(await b.initialize())
            out["tools"] = wire(await a.list_tools())

            # A finds B among the agents (and B finds A).
            out["agents_a"] = wire(await a.call_tool("list_agents", {}))
            out["agents_b"] = wire(await b.call_tool("list_agents", {}))
            b_id = agent(out["agents_a"], "workspace", ws_b)["instance_id"]

            # A hands B a task; B hears of it as a log notification.
            out["send"] = wire(
                await a.call_tool(
                    "send_agent_message",
                    {"target_instance_id": b_id, "message": TASK},
                )
            )

            async def b_log():
                return list(logs) if logs else None

            await until("session B's log notification", b_log)

            # B takes the task; while it is open B may only answer A.
            out["claim"] = wire(await b.call_tool("check_inbox", {}))
            mid = out["claim"]["structuredContent"]["message_id"]
            out["denied"] = wire(
                await b.call_tool(
                    "send_agent_message",
                    {"target_instance_id": third, "message": "Can you help?"},
                )
            )
            out["complete"] = wire(
                await b.call_tool(
                    "complete_task", {"message_id": mid, "reply": REPLY}
                )
            )

            # The reply reaches A's inbox.
            async def reply():
                r = wire(await a.call_tool("check_inbox", {}))
                if r.get("structuredContent", {}).get("status") == "empty":
                    return None
                return r

            out["reply"] = await until("the reply in session A's inbox", reply)
            out["complete_reply"] = wire(
                await a.call_tool(
                    "complete_task",
                    {"message_id": out["reply"]["structuredContent"]["message_id"]},
                )
            )
            out["inbox_a_after"] = wire(await a.call_tool("check_inbox", {}))
            out["unknown_tool"] = await rpc_error(a.call_tool("no_such_tool", {}))
            out["logs_b"] = list(logs)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit("usage: session.py BATON WORKSPACE_A WORKSPACE_B THIRD_ID")
    asyncio.run(asyncio.wait_for(main(*sys.argv[1:]), timeout=6 * STEP))
