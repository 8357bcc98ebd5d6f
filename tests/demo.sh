#!/bin/sh
# The main job of baton, end to end, in a few seconds: two agents in
# temporary workspaces; alice hands bob a task, bob's agent claims it and
# completes it. Everything runs in a private registry and state directory
# that is removed at the end, and every process started is stopped by pid.
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

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

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
(cd "$work/bob" && exec "$baton" serve --name bob 2>"$work/bob.log") &
pids="$pids $!"
wait_for alice
wait_for bob

step baton list
"$baton" list

step "cd alice && baton send bob 'rename users.name to users.display_name and run the tests'"
(cd "$work/alice" && "$baton" send bob 'rename users.name to users.display_name and run the tests')

step "baton inbox list bob"
"$baton" inbox list bob

step "cd bob && baton inbox claim     # bob's agent takes the next task"
envelope=$(cd "$work/bob" && "$baton" inbox claim)
printf '%s\n' "$envelope"
id=$(printf '%s\n' "$envelope" | sed -n '1s/.* message_id="\([^"]*\)">$/\1/p')
[ -n "$id" ] || { echo "demo: no task was claimed" >&2; exit 1; }

step "cd bob && baton inbox complete $id"
(cd "$work/bob" && "$baton" inbox complete "$id")

step "baton status bob"
"$baton" status bob

printf '\ndemo: done; stopping alice and bob and removing %s\n' "$work"
