#!/usr/bin/env bash
# Bring up a real Slurm "cluster" on this host for drtp's tests: munge, slurmctld and NNODES virtual
# slurmd nodes (n1..nN, all on 127.0.0.1), plus an OpenSSH server on 127.0.0.1:$SSH_PORT with a fresh
# key for root.  Runs as root, needs no stdin and no systemd.  Everything it writes (slurm.conf,
# state, logs, pid files, the ssh key) is under $CI_DIR, so /etc/slurm is left alone: use it with
#   export SLURM_CONF=$CI_DIR/etc/slurm.conf
# Every daemon's pid is saved as $CI_DIR/*.pid; slurm-cluster-down.sh stops exactly those.
# Packages: slurmctld slurmd slurm-client munge openssh-server openssh-sftp-server (INSTALL=1 installs them).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
NNODES=${NNODES:-2}                   # virtual slurmd nodes on this host ($NODE_PREFIX1..N)
NODE_PREFIX=${NODE_PREFIX:-n}         # node names; distinct prefixes keep two clusters' cgroups apart
CPUS_PER_NODE=${CPUS_PER_NODE:-4}     # may exceed nproc (SlurmdParameters=config_overrides)
SSH_PORT=${SSH_PORT:-2222}
CTLD_PORT=${CTLD_PORT:-6817}
SLURMD_PORT_BASE=${SLURMD_PORT_BASE:-17000}
CI_DIR=${CI_DIR:-/tmp/drtp-slurm-cluster}
PROCTRACK=${PROCTRACK:-auto}          # auto: proctrack/cgroup where cgroup v1 freezer is mounted, else linuxproc
INSTALL=${INSTALL:-0}                 # 1: apt-get install the packages first
mkdir -p "$CI_DIR"/etc "$CI_DIR"/state "$CI_DIR"/log "$CI_DIR"/spool
export SLURM_CONF="$CI_DIR/etc/slurm.conf"
T0=$(date +%s.%N)
ts() { awk -v a="$(date +%s.%N)" -v b="$T0" -v m="$*" 'BEGIN{printf "[%6.1fs] %s\n", a-b, m}'; }
# daemons fork: the parent returns before the child has written its pid file
wait_pidfile() { for _ in $(seq 1 100); do [ -s "$1" ] && return 0; sleep 0.1; done; echo "no $1" >&2; return 1; }

if [ "$INSTALL" = 1 ]; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge \
        openssh-server openssh-sftp-server >/dev/null
    ts "packages installed"
fi
for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/bin/sbatch /usr/sbin/munged /usr/sbin/sshd; do
    [ -x "$b" ] || { echo "missing $b (install slurmctld slurmd slurm-client munge openssh-server)" >&2; exit 3; }
done

# ---- munge (reuse a munged that already answers; then it is not ours to stop)
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    ts "munged already running (reused)"
else
    [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
    install -d -o munge -g munge -m 0755 /run/munge
    rm -f /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged
    wait_pidfile /run/munge/munged.pid; cp /run/munge/munged.pid "$CI_DIR/munged.pid"
    munge -n | unmunge >/dev/null
    ts "munged up"
fi

# ---- which process tracking works here
if [ "$PROCTRACK" = auto ]; then
    if grep -q ' /sys/fs/cgroup/freezer cgroup ' /proc/mounts; then PROCTRACK=proctrack/cgroup; else PROCTRACK=proctrack/linuxproc; fi
fi

write_conf() {
    local host; host=$(hostname -s)
    cat > "$SLURM_CONF" <<CONF
ClusterName=drtpci
SlurmctldHost=${host}(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=${CTLD_PORT}
StateSaveLocation=${CI_DIR}/state
SlurmdSpoolDir=${CI_DIR}/spool/slurmd-%n
SlurmctldPidFile=${CI_DIR}/run-slurmctld.pid
SlurmdPidFile=${CI_DIR}/run-slurmd-%n.pid
SlurmctldLogFile=${CI_DIR}/log/slurmctld.log
SlurmdLogFile=${CI_DIR}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=${PROCTRACK}
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MailProg=/bin/true
ReturnToService=2
MinJobAge=600
KillWait=5
CONF
    for i in $(seq 1 "$NNODES"); do
        echo "NodeName=$NODE_PREFIX$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$((SLURMD_PORT_BASE + i)) CPUs=$CPUS_PER_NODE State=UNKNOWN"
    done >> "$SLURM_CONF"
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> "$SLURM_CONF"
    if [ "$PROCTRACK" = proctrack/cgroup ]; then
        printf '%s\n' CgroupPlugin=cgroup/v1 CgroupAutomount=no ConstrainCores=no \
            ConstrainRAMSpace=no ConstrainDevices=no > "$CI_DIR/etc/cgroup.conf"
    else
        rm -f "$CI_DIR/etc/cgroup.conf"
    fi
}

slurmd_log_tail() {  # the last lines of a node's log, on stderr: why it did not come up
    local log="$CI_DIR/log/slurmd-$1.log"
    [ -f "$log" ] && { echo "--- tail of $log" >&2; tail -n 4 "$log" >&2; }
    return 0
}

start_slurmds() {  # returns 1 if a slurmd does not come up (2: its port was taken, no point falling back)
    for i in $(seq 1 "$NNODES"); do
        rm -f "$CI_DIR/run-slurmd-$NODE_PREFIX$i.pid"
        /usr/sbin/slurmd -N "$NODE_PREFIX$i" || { slurmd_log_tail "$NODE_PREFIX$i"; return 1; }
        if ! wait_pidfile "$CI_DIR/run-slurmd-$NODE_PREFIX$i.pid"; then
            slurmd_log_tail "$NODE_PREFIX$i"
            if grep -q 'Unable to bind listen port' "$CI_DIR/log/slurmd-$NODE_PREFIX$i.log" 2>/dev/null; then
                echo "slurmd $NODE_PREFIX$i: port $((SLURMD_PORT_BASE + i)) is already in use" >&2
                return 2
            fi
            return 1
        fi
        cp "$CI_DIR/run-slurmd-$NODE_PREFIX$i.pid" "$CI_DIR/slurmd-$NODE_PREFIX$i.pid"
    done
}

write_conf
seq -f "$NODE_PREFIX%g" 1 "$NNODES" > "$CI_DIR/node-names"   # for slurm-cluster-down.sh
rm -f "$CI_DIR/run-slurmctld.pid"
/usr/sbin/slurmctld -c                        # -c: clean job state
wait_pidfile "$CI_DIR/run-slurmctld.pid"; cp "$CI_DIR/run-slurmctld.pid" "$CI_DIR/slurmctld.pid"
rc=0; start_slurmds || rc=$?
if [ "$rc" = 2 ]; then
    exit 4                                    # a port clash: the caller picks other ports
elif [ "$rc" != 0 ] && [ "$PROCTRACK" = proctrack/cgroup ]; then
    ts "slurmd failed with proctrack/cgroup: falling back to proctrack/linuxproc"
    for f in "$CI_DIR"/slurmd-*.pid; do [ -f "$f" ] && { kill "$(cat "$f")" 2>/dev/null || true; rm -f "$f"; }; done
    PROCTRACK=proctrack/linuxproc
    write_conf
    scontrol reconfigure
    start_slurmds || exit 1
elif [ "$rc" != 0 ]; then
    exit 1
fi
echo "$PROCTRACK" > "$CI_DIR/proctrack"
for _ in $(seq 1 150); do                     # wait until every node is idle
    [ "$(sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle$')" = "$NNODES" ] && break
    sleep 0.2
done
sinfo -N
ts "slurm up ($PROCTRACK)"
srun -N "$NNODES" -n "$NNODES" hostname </dev/null
ts "first srun done"

# ---- sshd on loopback only, key-only root login, a fresh key
ssh-keygen -A >/dev/null                      # no-op if the package already made host keys
install -d -m 0755 /run/sshd                  # privilege separation dir; normally made by init
rm -f "$CI_DIR/sshd.pid"
/usr/sbin/sshd -p "$SSH_PORT" -o ListenAddress=127.0.0.1 -o PasswordAuthentication=no \
    -o PidFile="$CI_DIR/sshd.pid" -E "$CI_DIR/log/sshd.log"
wait_pidfile "$CI_DIR/sshd.pid"
[ -f "$CI_DIR/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C drtp-ci@localhost -f "$CI_DIR/id_ed25519"
install -d -m 0700 /root/.ssh
grep -qxF "$(cat "$CI_DIR/id_ed25519.pub")" /root/.ssh/authorized_keys 2>/dev/null \
    || cat "$CI_DIR/id_ed25519.pub" >> /root/.ssh/authorized_keys
chmod 0600 /root/.ssh/authorized_keys
ssh -i "$CI_DIR/id_ed25519" -p "$SSH_PORT" -o BatchMode=yes -o StrictHostKeyChecking=no \
    -o UserKnownHostsFile="$CI_DIR/known_hosts" root@127.0.0.1 echo ssh-ok </dev/null
ts "sshd up"
