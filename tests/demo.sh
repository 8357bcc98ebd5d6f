#!/bin/sh
# The main job of baton, end to end, in a few seconds: two agents in
# temporary workspaces. alice is an agent that pulls its tasks; bob runs
# each task through a small shell handler and replies with its output.
# alice hands bob a task, bob's handler runs it, the reply comes back to
# alice; then alice sends bob another task and waits for its answer
# (send --wait). Everything lives in a private registry and state directory that is
# removed at the end, and every process started is stopped by pid. The
# output is plain text (no terminal escapes) in lines of 100 characters at
# most, so it reads the same piped, logged or on a terminal.
set -eu

baton=${1:-target/release/baton}
case $baton in /*) ;; *) baton=$PWD/$baton ;; esac
[ -x "$baton" ] || { echo "demo: $baton is not built (run make demo)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/baton-demo.XXXXXX")
pids=
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || :; done
	for p in $pids; do wait "$p" 2>/dev/null || :; done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export BATON_DIR="$work/registry" XDG_STATE_HOME="$work/state"
unset BATON_SOCKET BATON_TURN || :
mkdir -p "$work/alice" "$work/bob" "$work/state"
printf 'int main(void) { return 0; }\n' >"$work/bob/main.c"
printf '# bob\n' >"$work/bob/README"

# bob's handler: the envelope arrives on stdin; stdout is the reply.
cat >"$work/handler.sh" <<'HANDLER'
cat >/dev/null
echo "bob ran a task from $BATON_SENDER_NAME; the files here are:"
ls
HANDLER

step() { printf '\n$ %s\n' "$*"; }

# Cuts lines to 100 characters (a transcript line can be longer).
short() { awk '{ if (length($0) > 100) $0 = substr($0, 1, 97) "..."; print }'; }

# Waits (5 s at most) until an instance with this name answers.
wait_for() {
	i=0
	until "$baton" ping "$1" >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -le 100 ] || { echo "demo: $1 did not start" >&2; exit 1; }
		sleep 0.05
	done
}

(cd "$work/alice" && exec "$baton" serve --name alice 2>"$work/alice.log") &
pids="$pids $!"
(cd "$work/bob" && exec "$baton" serve --name bob --exec "sh $work/handler.sh" --reply 2>"$work/bob.log") &
pids="$pids $!"
wait_for alice
wait_for bob

step baton list
"$baton" list | short

step "baton send --from alice bob 'list the files in your workspace'"
"$baton" send --from alice --message-id task-1 bob 'list the files in your workspace'

step "# bob's handler runs; its output goes back to alice as a reply"
i=0
until "$baton" inbox list alice --json | grep -q '"message_id"'; do
	i=$((i + 1))
	[ $i -le 100 ] || { echo "demo: no reply reached alice" >&2; exit 1; }
	sleep 0.05
done
"$baton" inbox list alice | short

step "baton inbox claim alice     # alice's agent reads the reply"
envelope=$("$baton" inbox claim alice)
printf '%s\n' "$envelope" | short
id=$(printf '%s\n' "$envelope" | sed -n '1s/.* message_id="\([^"]*\)">$/\1/p')
[ -n "$id" ] || { echo "demo: no reply was claimed" >&2; exit 1; }
"$baton" inbox complete alice "$id" >/dev/null

step "baton send --from alice --wait bob 'and now?'   # alice waits for bob's answer"
"$baton" send --from alice --message-id task-2 --wait --timeout 20 bob 'and now?'

step "baton log bob"
"$baton" log bob | short

step "baton log alice"
"$baton" log alice | short

step "baton stop bob"
"$baton" stop bob

printf '\ndemo: done; stopping alice and removing the demo directory\n'
