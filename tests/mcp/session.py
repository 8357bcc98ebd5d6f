"""Two `baton mcp` sessions hand a task over through a real MCP client.

tests/mcp.rs runs this with the Python `mcp` SDK, in the private world of
its test (BATON_DIR, XDG_STATE_HOME, HOME and TMPDIR come from the
environment and are passed on to both servers):

    python3 tests/mcp/session.py BATON WORKSPACE_A WORKSPACE_B THIRD_ID WAITING_ID

Session A is `baton mcp --name alpha` in WORKSPACE_A and session B is
`baton mcp --name beta` in WORKSPACE_B; THIRD_ID is the instance id of a
third instance the test runs, and WAITING_ID the id of a task that waits
in beta's spool before session B starts. The script takes each step a
host would take and prints one JSON object on stdout: every answer it
got, in wire form (camelCase, as the server sent it), the log messages
session B's logging callback got, and every notification the SDK
delivered to each session's message handler. tests/mcp.rs decides
whether they are right; this script exits non-zero only when a step
cannot be taken at all (a wait ran out, a server did not start). Every
wait is bounded. The SDK stops both servers when their sessions close:
it closes their stdin, and terminates them if they linger.
"""

import asyncio
import json
import os
import sys
import warnings

from mcp import ClientSession, StdioServerParameters
from mcp import types
from mcp.client.stdio import stdio_client

# The longest any single wait may take, in seconds.
STEP = 20
# How long a notice that must not come is waited for, in seconds: far
# longer than one takes to arrive (milliseconds).
QUIET = 2

# logging/setLevel is what this script tests, deprecated in the SDK or not.
warnings.filterwarnings("ignore", message=".*logging capability is deprecated.*")

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


async def within(seconds, probe):
    """Calls `probe` until it returns something, for at most `seconds`;
    returns None if it never does."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        got = await probe()
        if got is not None:
            return got
        if loop.time() > deadline:
            return None
        await asyncio.sleep(0.05)


async def until(what, probe):
    """Calls `probe` until it returns something, for at most STEP seconds."""
    got = await within(STEP, probe)
    if got is None:
        raise TimeoutError(f"waited {STEP} s for {what}")
    return got


async def tool(session, name, arguments):
    """A tool's result in wire form, or {"rpc_error": ...} if the call
    ended with a JSON-RPC error instead."""
    try:
        return wire(await session.call_tool(name, arguments))
    except Exception as e:
        err = getattr(e, "error", None)
        if err is None:
            raise
        return {"rpc_error": {"code": err.code, "message": err.message}}


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


def noticed(notes, mid):
    """The first log notification in `notes` that names task `mid`."""
    for n in notes:
        if n.get("method") == "notifications/message" and mid in str(
            n.get("params", {}).get("data", "")
        ):
            return n
    return None


async def main(baton, ws_a, ws_b, third, waiting):
    # The revision the SDK asks for in initialize.
    out = {"asked": types.LATEST_PROTOCOL_VERSION}
    logs = []
    # Every notification the SDK delivered to each session, in order of
    # arrival, and anything else its message handler got (transport faults).
    notes = {"a": [], "b": []}
    faults = []

    async def on_log(params):
        logs.append(wire(params))

    def handler(key):
        async def on_message(message):
            if isinstance(message, Exception):
                faults.append(f"session {key}: {message!r}")
            else:
                notes[key].append(wire(message))

        return on_message

    async with stdio_client(server(baton, ws_a, "alpha")) as (ra, wa), stdio_client(
        server(baton, ws_b, "beta")
    ) as (rb, wb):
        async with ClientSession(
            ra, wa, message_handler=handler("a")
        ) as a, ClientSession(
            rb, wb, logging_callback=on_log, message_handler=handler("b")
        ) as b:
            out["initialize_a"] = wire(await a.initialize())
            # The SDK sends notifications/initialized itself, last thing
            # in initialize().
            out["initialize_b"] = wire(await b.initialize())

            def notice_b(mid):
                async def probe():
                    return noticed(notes["b"], mid)

                return probe

            # Then B's host hears of the task that waited before it began,
            # and B takes it (a plain command line's: nothing to answer).
            await until("session B's notice of the waiting task", notice_b(waiting))
            out["claim_waiting"] = await tool(b, "check_inbox", {})
            out["complete_waiting"] = await tool(
                b, "complete_task", {"message_id": waiting}
            )

            out["tools"] = wire(await a.list_tools())

            # A finds B among the agents (and B finds A).
            out["agents_a"] = wire(await a.call_tool("list_agents", {}))
            out["agents_b"] = wire(await b.call_tool("list_agents", {}))
            b_id = agent(out["agents_a"], "workspace", ws_b)["instance_id"]
            # An argument list_agents does not take is refused.
            out["agents_unknown_argument"] = await tool(
                b, "list_agents", {"verbose": True}
            )

            # A hands B a task; B hears of it as a log notification.
            out["send"] = wire(
                await a.call_tool(
                    "send_agent_message",
                    {"target_instance_id": b_id, "message": TASK},
                )
            )
            mid = out["send"]["structuredContent"]["message_id"]
            await until("session B's notice of the task", notice_b(mid))

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

            # B's host wants errors only: a task A sends now is announced
            # to no one. Its notice is waited for (QUIET s), in vain.
            out["set_level_error"] = wire(await b.set_logging_level("error"))
            out["send_quiet"] = await tool(
                a,
                "send_agent_message",
                {"target_instance_id": b_id, "message": "Quiet."},
            )
            quiet = out["send_quiet"]["structuredContent"]["message_id"]
            out["quiet_noticed_in_wait"] = await within(QUIET, notice_b(quiet))
            # Back at info, the next task is announced: wait for its notice
            # (notices come in order), then look for the first one's.
            out["set_level_info"] = wire(await b.set_logging_level("info"))
            out["send_loud"] = await tool(
                a,
                "send_agent_message",
                {"target_instance_id": b_id, "message": "Loud."},
            )
            loud = out["send_loud"]["structuredContent"]["message_id"]
            await until("session B's notice of the task after info", notice_b(loud))

            out["logs_b"] = list(logs)
            out["notes_a"] = list(notes["a"])
            out["notes_b"] = list(notes["b"])
            out["faults"] = list(faults)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(
            "usage: session.py BATON WORKSPACE_A WORKSPACE_B THIRD_ID WAITING_ID"
        )
    asyncio.run(asyncio.wait_for(main(*sys.argv[1:]), timeout=7 * STEP))
