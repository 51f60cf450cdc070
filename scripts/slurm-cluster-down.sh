#!/usr/bin/env bash
# Stop exactly the daemons slurm-cluster-up.sh started (by their saved pids), in dependency order,
# and remove the key it added to root's authorized_keys.
CI_DIR=${CI_DIR:-/tmp/drtp-slurm-cluster}
stop() {  # stop the pids in the given pid files; wait up to 10 s, then SIGKILL
    local pids=() f p
    for f in "$@"; do
        [ -f "$f" ] || continue
        p=$(cat "$f"); kill "$p" 2>/dev/null && pids+=("$p"); rm -f "$f"
    done
    for _ in $(seq 1 100); do
        local alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break; sleep 0.1
    done
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && kill -KILL "$p"; done
    [ ${#pids[@]} -gt 0 ] && echo "stopped: ${pids[*]}"
    return 0
}
stop "$CI_DIR"/slurmd-*.pid
stop "$CI_DIR"/slurmctld.pid
stop "$CI_DIR"/sshd.pid "$CI_DIR"/munged.pid
if [ -f "$CI_DIR/id_ed25519.pub" ] && [ -f /root/.ssh/authorized_keys ]; then
    grep -vxF "$(cat "$CI_DIR/id_ed25519.pub")" /root/.ssh/authorized_keys > /root/.ssh/authorized_keys.tmp || true
    mv /root/.ssh/authorized_keys.tmp /root/.ssh/authorized_keys; chmod 0600 /root/.ssh/authorized_keys
fi
# proctrack/cgroup leaves empty per-node cgroups behind (/sys/fs/cgroup/freezer/slurm_n1 ...)
for node in $(cat "$CI_DIR/node-names" 2>/dev/null); do
    for d in /sys/fs/cgroup/*/"slurm_$node"; do
        [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
done
true
