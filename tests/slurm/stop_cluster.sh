#!/usr/bin/env bash
# Stop the daemons that tests/slurm/start_cluster.sh started, by the pids it recorded.
#
#   tests/slurm/stop_cluster.sh STATE_DIR
#
# Sends SIGTERM to each recorded pid (slurmd first, munged last), waits, then SIGKILLs
# any survivor. Only pids whose command name still matches the recorded daemon are
# signalled, so a recycled pid is never hit. Removes STATE_DIR/pids when done.
set -uo pipefail

[ $# -eq 1 ] || { echo "usage: $0 STATE_DIR" >&2; exit 2; }
STATE=$1
PIDFILE="$STATE/pids"
if [ ! -f "$PIDFILE" ]; then
    echo "stop_cluster.sh: no $PIDFILE; nothing to stop"
    exit 0
fi

names=(); pids=()
while read -r name pid; do
    [ -n "${pid:-}" ] || continue
    names+=("$name"); pids+=("$pid")
done < "$PIDFILE"

is_ours() {  # pid still alive (not a zombie) and still the daemon we started?
    local name=$1 pid=$2 stat
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != "Z" ]
}

# Cancel jobs still queued or running (e.g. left by a test that timed out), so no job step
# (slurmstepd and the job's processes) outlives slurmd. Every job on this cluster is a test's.
conf="$STATE/etc/slurm.conf"
if [ -f "$conf" ] && command -v squeue >/dev/null; then
    jobs=$(SLURM_CONF="$conf" timeout 10 squeue --noheader --states=PENDING,RUNNING,CONFIGURING,COMPLETING --format=%i 2>/dev/null || true)
    if [ -n "$jobs" ]; then
        echo "stop_cluster.sh: cancelling leftover jobs:" $jobs
        SLURM_CONF="$conf" timeout 10 scancel $jobs 2>/dev/null || true
        for _ in $(seq 30); do
            left=$(SLURM_CONF="$conf" timeout 10 squeue --noheader --format=%i 2>/dev/null || true)
            [ -z "$left" ] && break
            sleep 0.5
        done
    fi
fi

# Reverse start order: slurmd, slurmctld, munged (slurm needs munge to shut down cleanly).
for (( i=${#pids[@]}-1; i>=0; i-- )); do
    name=${names[$i]}; pid=${pids[$i]}
    is_ours "$name" "$pid" || continue
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 100); do is_ours "$name" "$pid" || break; sleep 0.1; done
    if is_ours "$name" "$pid"; then
        echo "stop_cluster.sh: $name ($pid) ignored SIGTERM for 10 s; sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null
    fi
    echo "stop_cluster.sh: stopped $name ($pid)"
done
rm -f "$PIDFILE"
# The /etc/slurm/slurm.conf symlink start_cluster.sh made, if it still points at us.
if [ -L /etc/slurm/slurm.conf ] && [ "$(readlink /etc/slurm/slurm.conf)" = "$(cd "$STATE" && pwd)/etc/slurm.conf" ]; then
    rm -f /etc/slurm/slurm.conf
fi
