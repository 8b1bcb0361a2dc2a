#!/usr/bin/env bash
# A single-node SLURM on this machine, to run the cluster path (profiles/slurm) for real.
#
#   scripts/slurm-local.sh up       start munge, MariaDB, slurmdbd, slurmctld and slurmd (idempotent)
#   scripts/slurm-local.sh status   what runs (exit 0 when all of it runs, 3 otherwise)
#   scripts/slurm-local.sh down     stop every daemon `up` started, by its recorded pid (idempotent)
#   scripts/slurm-local.sh env      the line that points SLURM's commands at this cluster:
#                                   eval "$(scripts/slurm-local.sh env)"
#
# Installs nothing: the Debian packages come first (docs/slurm-local.md):
#   apt-get install -y --no-install-recommends slurm-wlm slurmdbd munge mariadb-server
#
# One partition, `gpu` (the default, and the profile's name), on one node: this machine under its
# own hostname, declaring one GPU as a generic resource with no device behind it (gres.conf:
# Count=1 File=/dev/null, as SLURM 22.05 drops a GPU without File=), so jobs that ask --gpus=1 are
# scheduled; without a real GPU they then fail in the pipeline's own GPU check. No cgroups
# (proctrack/linuxproc, task/none), so it runs in containers. Accounting goes through slurmdbd into
# a private MariaDB, because the SLURM executor plugin asks `sacct` for its jobs' states.
#
# Everything (configuration, munge key and socket, database, spool, logs, pid files) lies under one
# state folder. The one thing outside it is a link that `up` makes and `down` removes:
# /etc/slurm/slurm.conf -> <state>/etc/slurm.conf, where SLURM's commands look without SLURM_CONF.
# It is needed because the executor plugin's job step runs `srun` inside each job with every SLURM_*
# variable but the job's id removed, SLURM_CONF included. `up` refuses to replace another
# cluster's slurm.conf.
#
# Environment: SLURM_LOCAL_DIR (the state folder, default /tmp/slurm-local); SLURM_LOCAL_PORT (the
# first of four TCP ports on 127.0.0.1, in turn slurmctld's, slurmd's, slurmdbd's and MariaDB's;
# default 6817, SLURM's own first three); SLURM_LOCAL_CPUS and SLURM_LOCAL_MEM_MB (what the node
# declares; default this machine's, but at least 8 cores and 32768 MB, since the profile's GPU jobs
# ask 4 cores and 16000 MB; nothing enforces them); SLURM_LOCAL_CLUSTER (default `local`).
set -euo pipefail

PATH="$PATH:/usr/sbin:/sbin"
STATE="${SLURM_LOCAL_DIR:-/tmp/slurm-local}"
case "$STATE" in /*) ;; *) STATE="$PWD/$STATE" ;; esac
ETC="$STATE/etc"
RUN="$STATE/run"
LOG="$STATE/log"
SPOOL="$STATE/spool"
DB="$STATE/mysql"
MUNGE_DIR="$STATE/munge"
MUNGE_SOCKET="$MUNGE_DIR/munge.socket.2"
PORT="${SLURM_LOCAL_PORT:-6817}"
CTLD_PORT="$PORT"
SLURMD_PORT=$((PORT + 1))
DBD_PORT=$((PORT + 2))
DB_PORT=$((PORT + 3))
CLUSTER="${SLURM_LOCAL_CLUSTER:-local}"
PARTITION=gpu
export SLURM_CONF="$ETC/slurm.conf"
# where SLURM's commands look without SLURM_CONF: `up` links it to ours (see link_default_conf)
DEFAULT_CONF=/etc/slurm/slurm.conf
# the order daemons start in; `down` stops them in the reverse order
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)
INSTALL="apt-get install -y --no-install-recommends slurm-wlm slurmdbd munge mariadb-server"

die() {  # one sentence, and the exit status (default 1)
    echo "slurm-local: $1" >&2
    exit "${2:-1}"
}

note() { echo "slurm-local: $*"; }

mariadbd_bin() { command -v mariadbd || command -v mysqld || true; }
install_db_bin() { command -v mariadb-install-db || command -v mysql_install_db || true; }
mysql_bin() { command -v mariadb || command -v mysql || true; }

require_binaries() {
    local missing=() b
    for b in munged munge unmunge slurmdbd slurmctld slurmd sacct sacctmgr sbatch sinfo scontrol squeue scancel; do
        command -v "$b" >/dev/null || missing+=("$b")
    done
    [ -n "$(mariadbd_bin)" ] || missing+=("mariadbd/mysqld")
    [ -n "$(install_db_bin)" ] || missing+=("mariadb-install-db")
    [ -n "$(mysql_bin)" ] || missing+=("mariadb/mysql")
    if [ "${#missing[@]}" -gt 0 ]; then
        local list
        list=$(printf '%s, ' "${missing[@]}")
        die "missing ${list%, } (this script installs nothing): install them first with: $INSTALL" 2
    fi
}

require_root() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (slurmd starts each job as its user, munged and slurmdbd run as root here)" 2
}

pid_of() {  # the recorded pid of a daemon that still runs as that program, else nothing
    local name=$1 pid comm
    [ -f "$RUN/$name.pid" ] || return 0
    pid=$(cat "$RUN/$name.pid" 2>/dev/null || true)
    [[ "$pid" =~ ^[0-9]+$ ]] || return 0
    comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
    # mariadbd may be the mysqld binary; comm is at most 15 characters
    case "$name:$comm" in
        munged:munged | slurmdbd:slurmdbd | slurmctld:slurmctld | slurmd:slurmd | mariadbd:mariadbd | mariadbd:mysqld)
            echo "$pid" ;;
    esac
}

running_count() {
    local n=0 d
    for d in "${DAEMONS[@]}"; do [ -n "$(pid_of "$d")" ] && n=$((n + 1)); done
    echo "$n"
}

start() {  # start a daemon in the foreground of its own session, record its pid
    local name=$1
    shift
    # setsid execs in place (this shell's children lead no process group), so $! is the daemon;
    # stdin/stdout/stderr off the caller's pipes, so a caller capturing output is not held open
    setsid "$@" </dev/null >>"$LOG/$name.out" 2>&1 &
    echo $! >"$RUN/$name.pid"
}

wait_for() {  # wait_for SECONDS DAEMON WHAT COMMAND...: poll until the command succeeds
    local seconds=$1 daemon=$2 what=$3 i
    shift 3
    for ((i = 0; i < seconds * 2; i++)); do
        if timeout 10 "$@" >/dev/null 2>&1; then return 0; fi
        if [ -n "$daemon" ] && [ -z "$(pid_of "$daemon")" ]; then
            die "$daemon exited while starting (see $LOG/$daemon.out and $LOG/$daemon.log)"
        fi
        sleep 0.5
    done
    die "$what did not come up within ${seconds}s (logs: $LOG)"
}

node_name() { hostname -s; }

write_configs() {
    local node cpus mem
    node=$(node_name)
    cpus="${SLURM_LOCAL_CPUS:-$(nproc)}"
    [ -n "${SLURM_LOCAL_CPUS:-}" ] || [ "$cpus" -ge 8 ] || cpus=8
    mem="${SLURM_LOCAL_MEM_MB:-$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)}"
    [ -n "${SLURM_LOCAL_MEM_MB:-}" ] || [ "$mem" -ge 32768 ] || mem=32768
    cat >"$ETC/slurm.conf" <<EOF
# Written by scripts/slurm-local.sh: a single-node cluster on this machine.
ClusterName=$CLUSTER
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$SPOOL/slurmctld
SlurmdSpoolDir=$SPOOL/slurmd
SlurmctldPidFile=$RUN/slurmctld.self.pid
SlurmdPidFile=$RUN/slurmd.self.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups: this runs in containers
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
# the node is taken as declared below, whatever this machine has
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStorageTRES=gres/gpu
# sacct's Comment column then shows the plugin's rule_<rule or group>_wildcards_... of each job
AccountingStoreFlags=job_comment
# the connection to slurmdbd takes its munge socket from here, not from AuthInfo
AccountingStoragePass=$MUNGE_SOCKET
JobCompType=jobcomp/none
InactiveLimit=0
KillWait=10
MinJobAge=300
SlurmctldTimeout=60
SlurmdTimeout=120
NodeName=$node NodeHostname=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:1 State=UNKNOWN
PartitionName=$PARTITION Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$ETC/gres.conf" <<EOF
# One GPU with no device behind it. SLURM 22.05 drops a GPU without File= ("Removing file-less
# GPU"), so it points at /dev/null; no cgroup confines devices here, so nothing opens it.
NodeName=$node Name=gpu Count=1 File=/dev/null
EOF
    (
        umask 077
        cat >"$ETC/slurmdbd.conf" <<EOF
# Written by scripts/slurm-local.sh.
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.self.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(cat "$DB/slurm.password")
StorageLoc=slurm_acct_db
EOF
    )
}

mysql_root() { timeout 30 "$(mysql_bin)" --no-defaults --protocol=socket -S "$DB/mysqld.sock" -u root "$@"; }

up_munge() {
    [ -z "$(pid_of munged)" ] || return 0
    if [ ! -s "$MUNGE_DIR/munge.key" ]; then
        (umask 077 && dd if=/dev/urandom of="$MUNGE_DIR/munge.key" bs=1024 count=1 status=none)
    fi
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    start munged munged --foreground --key-file="$MUNGE_DIR/munge.key" --socket="$MUNGE_SOCKET" \
        --pid-file="$RUN/munged.self.pid" --log-file="$LOG/munged.log" --seed-file="$MUNGE_DIR/munged.seed"
    # shellcheck disable=SC2016 # $1 is sh's argument
    wait_for 20 munged munged sh -c 'munge -n -S "$1" | unmunge -S "$1"' sh "$MUNGE_SOCKET"
}

up_mariadb() {
    [ -z "$(pid_of mariadbd)" ] || return 0
    if [ ! -d "$DB/data/mysql" ]; then
        rm -rf "$DB/data"
        "$(install_db_bin)" --no-defaults --user=root --datadir="$DB/data" --skip-test-db \
            --auth-root-authentication-method=socket >"$LOG/mariadb-install-db.log" 2>&1 ||
            die "mariadb-install-db failed (log: $LOG/mariadb-install-db.log)"
    fi
    [ -s "$DB/slurm.password" ] || (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$DB/slurm.password")
    start mariadbd "$(mariadbd_bin)" --no-defaults --user=root --datadir="$DB/data" \
        --socket="$DB/mysqld.sock" --pid-file="$DB/mysqld.pid" --port="$DB_PORT" --bind-address=127.0.0.1 \
        --log-error="$LOG/mariadbd.log" --skip-log-bin --innodb-lock-wait-timeout=900
    wait_for 60 mariadbd MariaDB "$(mysql_bin)" --no-defaults --protocol=socket -S "$DB/mysqld.sock" -u root -e "SELECT 1"
    # slurmdbd's database user, with the password in slurmdbd.conf (idempotent)
    local pw
    pw=$(cat "$DB/slurm.password")
    mysql_root -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pw';
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pw';
        ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pw';
        ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$pw';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" ||
        die "could not create MariaDB's user for slurmdbd (log: $LOG/mariadbd.log)"
}

up_slurmdbd() {
    [ -z "$(pid_of slurmdbd)" ] || return 0
    start slurmdbd slurmdbd -D
    wait_for 60 slurmdbd slurmdbd sacctmgr -n list cluster
}

register() {  # the cluster, and the user that runs this, with a default account (root's)
    local user
    user=$(id -un)
    if ! timeout 30 sacctmgr -n -P list cluster format=cluster | grep -x "$CLUSTER" >/dev/null; then
        timeout 30 sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr could not add the cluster $CLUSTER"
    fi
    if ! timeout 30 sacctmgr -n -P list account format=account | grep -x root >/dev/null; then
        timeout 30 sacctmgr -i add account root cluster="$CLUSTER" >/dev/null || die "sacctmgr could not add the account root"
    fi
    if ! timeout 30 sacctmgr -n -P list association cluster="$CLUSTER" user="$user" format=user | grep -x "$user" >/dev/null; then
        timeout 30 sacctmgr -i add user "$user" account=root defaultaccount=root cluster="$CLUSTER" >/dev/null ||
            die "sacctmgr could not add the user $user to the account root"
    fi
}

link_default_conf() {  # /etc/slurm/slurm.conf -> ours, unless it is another cluster's
    local target
    if [ -L "$DEFAULT_CONF" ] || [ -e "$DEFAULT_CONF" ]; then
        target=$(readlink "$DEFAULT_CONF" || true)
        [ "$target" = "$SLURM_CONF" ] && return 0
        die "$DEFAULT_CONF exists and is not this cluster's (a job's nested srun reads it, as the SLURM executor plugin strips SLURM_CONF from it): move it away, or run this on a machine without one" 2
    fi
    mkdir -p "$(dirname "$DEFAULT_CONF")"
    ln -s "$SLURM_CONF" "$DEFAULT_CONF"
}

unlink_default_conf() {
    if [ -L "$DEFAULT_CONF" ] && [ "$(readlink "$DEFAULT_CONF")" = "$SLURM_CONF" ]; then
        rm -f "$DEFAULT_CONF"
        note "removed the link $DEFAULT_CONF"
    fi
}

node_idle() {  # the node takes jobs
    timeout 10 sinfo -h -n "$(node_name)" -o %T 2>/dev/null | grep -E '^(idle|mixed|allocated)$' >/dev/null
}

wait_node() {  # until the node takes jobs; one left drained or down by an earlier run is resumed
    local node state i
    node=$(node_name)
    for ((i = 0; i < 180; i++)); do
        state=$(timeout 10 sinfo -h -n "$node" -o %T 2>/dev/null || true)
        case "$state" in
            idle | mixed | allocated) return 0 ;;
            drain* | down*) timeout 10 scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true ;;
        esac
        [ -n "$(pid_of slurmd)" ] || die "slurmd exited while starting (see $LOG/slurmd.out and $LOG/slurmd.log)"
        sleep 0.5
    done
    die "node $node is not idle after 90s ($state: $(timeout 10 sinfo -h -R -o %E 2>/dev/null || true); logs: $LOG)"
}

cmd_up() {
    require_root
    require_binaries
    if [ "$(running_count)" -eq "${#DAEMONS[@]}" ] && node_idle; then
        link_default_conf
        note "already up: all ${#DAEMONS[@]} daemons run, node $(node_name) takes jobs (state: $STATE)"
        return 0
    fi
    mkdir -p "$ETC" "$RUN" "$LOG" "$SPOOL/slurmctld" "$SPOOL/slurmd" "$DB" "$MUNGE_DIR"
    # munged wants its socket's folders open to all (not writable); the database's stays private
    chmod 755 "$STATE" "$MUNGE_DIR"
    chmod 700 "$DB"
    up_munge
    up_mariadb
    # the configuration is rewritten only while no SLURM daemon reads it
    if [ -z "$(pid_of slurmdbd)$(pid_of slurmctld)$(pid_of slurmd)" ]; then write_configs; fi
    link_default_conf
    up_slurmdbd
    register
    if [ -z "$(pid_of slurmctld)" ]; then
        start slurmctld slurmctld -D -f "$SLURM_CONF"
        wait_for 60 slurmctld slurmctld scontrol ping
    fi
    if [ -z "$(pid_of slurmd)" ]; then
        start slurmd slurmd -D -f "$SLURM_CONF" -N "$(node_name)"
    fi
    wait_node
    note "up: partition $PARTITION, node $(node_name) with gres gpu:1 (state: $STATE, config linked from $DEFAULT_CONF)"
}

stop_pid() {  # stop_pid NAME: TERM, wait up to 30 s, then KILL
    local name=$1 pid i
    pid=$(pid_of "$name")
    if [ -z "$pid" ]; then
        rm -f "$RUN/$name.pid"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 60; i++)); do
        [ -n "$(pid_of "$name")" ] || break
        sleep 0.5
    done
    if [ -n "$(pid_of "$name")" ]; then
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
    fi
    rm -f "$RUN/$name.pid"
    note "stopped $name (pid $pid)"
}

cmd_down() {
    local i jobs
    if [ "$(running_count)" -eq 0 ]; then
        unlink_default_conf
        note "already down (state: $STATE)"
        return 0
    fi
    # jobs still on the node would outlive slurmd: cancel them first (every job here is a test's)
    if [ -n "$(pid_of slurmctld)" ] && jobs=$(timeout 20 squeue -h -o %i 2>/dev/null) && [ -n "$jobs" ]; then
        # shellcheck disable=SC2086
        timeout 20 scancel $jobs 2>/dev/null || true
        for ((i = 0; i < 30; i++)); do
            [ -z "$(timeout 10 squeue -h -o %i 2>/dev/null)" ] && break
            sleep 1
        done
    fi
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do stop_pid "${DAEMONS[i]}"; done
    unlink_default_conf
    note "down (state kept in $STATE; remove it to start afresh)"
}

cmd_status() {
    local d pid n=0
    for d in "${DAEMONS[@]}"; do
        pid=$(pid_of "$d")
        if [ -n "$pid" ]; then
            echo "$d: running (pid $pid)"
            n=$((n + 1))
        else
            echo "$d: stopped"
        fi
    done
    if [ -n "$(pid_of slurmctld)" ]; then
        timeout 20 sinfo -o "%P %a %D %T %N %G" 2>/dev/null || true
    fi
    echo "SLURM_CONF=$SLURM_CONF"
    if [ -L "$DEFAULT_CONF" ] && [ "$(readlink "$DEFAULT_CONF")" = "$SLURM_CONF" ]; then
        echo "$DEFAULT_CONF -> $SLURM_CONF"
    fi
    [ "$n" -eq "${#DAEMONS[@]}" ] || return 3
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) echo "export SLURM_CONF=$SLURM_CONF" ;;
    *) die "usage: $0 up|down|status|env" 2 ;;
esac
