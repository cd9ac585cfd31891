# shellcheck shell=bash
# galera.sh — a MariaDB Galera Cluster of three nodes on loopback for the integration tests.
#
# Sourced by internal/testenv/services.sh, it defines:
#   gal_start   start the three nodes (or reuse them when all answer, Synced, cluster size 3);
#               the first node bootstraps the cluster (--wsrep-new-cluster), the others join
#               it and receive its data by SST (rsync) or IST
#   gal_stop    stop every node by pid (TERM, wait, then KILL), joiners first so that the first
#               node is the last one down and may bootstrap the next start; return once each is
#               gone and its ports are free
#   gal_status  one line per node; exit 0 when all three are Synced in a cluster of 3
#   gal_env     print OE_GALERA_DSNS (one go-sql-driver DSN per node, comma-separated) and
#               OE_GALERA_SH (this script, for the tests that kill and restart a node)
#   gal_start_node N  start node N (1-3) again on the data it has, joining the running
#               cluster (IST when the donor's gcache still holds what it missed, else SST), and
#               wait until it is Synced: the restart after a fault test SIGKILLed it
#   gal_pid N   print node N's mariadbd pid (exit 1: not running)
# Executed, it runs one of them:
#   bash internal/testenv/galera.sh start|stop|status|env|start-node N|pid N
#
# Node N (1..3): SQL port GAL_PORT_BASE+N-1 (13316-13318), group communication port
# GAL_GCOMM_BASE+N-1 (14567-14569), IST port GAL_GCOMM_BASE+10+N-1 (14577-14579), SST (rsync
# daemon of a joiner) GAL_GCOMM_BASE+20+N-1 (14587-14589); all on 127.0.0.1. Users: root over
# the node's socket, oe/oe over TCP (ALL PRIVILEGES ON *.*), database oe.
# State: ${OE_STATE_DIR:-/tmp/orderexpiry-services}/galera/nodeN/{data,mariadbd.log,...}.
# Data survives stop; tests create (and drop) their own databases.
#
# Sizes are for a 2-core test box: 128 MiB buffer pool and 48 MiB redo log per node (the SST
# copies the redo log), gcache 128 MiB (what a killed node may miss and still rejoin by IST).
# Durability is relaxed as on the single MariaDB (innodb_flush_log_at_trx_commit=2): Galera's
# own guarantee is that a commit is certified on every node before it returns, not that it is
# on disk.

_GAL_SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

GAL_PORT_BASE="${GAL_PORT_BASE:-13316}"
GAL_GCOMM_BASE="${GAL_GCOMM_BASE:-14567}"
GAL_READY_TIMEOUT="${GAL_READY_TIMEOUT:-120}"
GAL_STOP_TIMEOUT="${GAL_STOP_TIMEOUT:-60}"
GAL_PROVIDER="${GAL_PROVIDER:-/usr/lib/galera/libgalera_smm.so}"
GAL_NODES=(1 2 3)

_gal_state() { echo "${OE_STATE_DIR:-/tmp/orderexpiry-services}/galera"; }
_gal_dir() { echo "$(_gal_state)/node$1"; }
_gal_port() { echo $((GAL_PORT_BASE + $1 - 1)); }
_gal_gcomm() { echo $((GAL_GCOMM_BASE + $1 - 1)); }
_gal_ist() { echo $((GAL_GCOMM_BASE + 10 + $1 - 1)); }
_gal_sst() { echo $((GAL_GCOMM_BASE + 20 + $1 - 1)); }
_gal_log() { echo "galera: $*" >&2; }

_GAL_MARIADBD="" _GAL_INSTALL_DB="" _GAL_CLIENT=""
_gal_bins() {
    local c
    _GAL_MARIADBD=""
    for c in /usr/sbin/mariadbd /usr/sbin/mysqld; do
        [[ -x $c ]] && _GAL_MARIADBD="$c" && break
    done
    _GAL_INSTALL_DB="$(command -v mariadb-install-db || command -v mysql_install_db || true)"
    _GAL_CLIENT="$(command -v mariadb || command -v mysql || true)"
}

# _gal_install: galera-4 (the provider) and rsync (the SST) come with Debian's mariadb-server
# as recommends; install them when missing (services.sh installs mariadb-server itself).
_gal_install() {
    _gal_bins
    local pkgs=()
    [[ -n $_GAL_MARIADBD && -n $_GAL_INSTALL_DB && -n $_GAL_CLIENT ]] || pkgs+=(mariadb-server)
    [[ -f $GAL_PROVIDER ]] || pkgs+=(galera-4)
    command -v rsync >/dev/null || pkgs+=(rsync)
    command -v ss >/dev/null || pkgs+=(iproute2) # wsrep_sst_rsync looks for its daemon's listener with ss
    ((${#pkgs[@]} == 0)) && return 0
    [[ $EUID -eq 0 ]] || { _gal_log "missing packages: ${pkgs[*]} (run as root, or install them)"; return 1; }
    _gal_log "installing: ${pkgs[*]}"
    local state policy=/usr/sbin/policy-rc.d made=0 rc=0
    state="$(_gal_state)"
    mkdir -p "$state"
    if [[ ! -e $policy ]]; then # no system-wide server started by the packages' scripts
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made=1
    fi
    {
        apt-get -o DPkg::Lock::Timeout=300 update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
                --no-install-recommends "${pkgs[@]}"
    } >"$state/apt.log" 2>&1 || rc=$?
    ((made)) && rm -f "$policy"
    if ((rc != 0)); then
        tail -n 30 "$state/apt.log" >&2
        _gal_log "apt-get failed (exit $rc) installing ${pkgs[*]}"
        return 1
    fi
    _gal_bins
    [[ -n $_GAL_MARIADBD && -f $GAL_PROVIDER ]] && command -v rsync >/dev/null
}

# _gal_alive PID: the process exists and is not a zombie.
_gal_alive() {
    local st
    st="$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)" || return 1
    [[ -n $st && $st != Z && $st != X ]]
}

# gal_pid N: node N's mariadbd pid, when that process is alive and serves node N's datadir.
gal_pid() {
    local d pid cmd
    d="$(_gal_dir "$1")"
    [[ -s $d/mariadbd.pid ]] || return 1
    pid="$(head -n1 "$d/mariadbd.pid" 2>/dev/null | tr -dc '0-9')"
    [[ -n $pid ]] && _gal_alive "$pid" || return 1
    cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    [[ $cmd == *"--datadir=$d/data "* ]] || return 1
    echo "$pid"
}

_gal_root() { # N ARGS...: the client as root over node N's socket
    local n="$1"
    shift
    timeout "${TMO:-30}" "$_GAL_CLIENT" --no-defaults --connect-timeout=3 --protocol=socket \
        --socket="$(_gal_dir "$n")/mysqld.sock" -uroot "$@"
}

# _gal_wsrep N: "SIZE STATE STATUS" of node N (cluster size, local state comment, cluster status).
_gal_wsrep() {
    TMO=5 _gal_root "$1" -N -B -e "SELECT
        (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME='WSREP_CLUSTER_SIZE'),
        (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME='WSREP_LOCAL_STATE_COMMENT'),
        (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME='WSREP_CLUSTER_STATUS')" 2>/dev/null
}

# _gal_synced N [SIZE]: node N answers, is Synced, in a Primary component of SIZE nodes (default 3).
_gal_synced() {
    local out size state status
    out="$(_gal_wsrep "$1")" || return 1
    read -r size state status <<<"$out"
    [[ $size == "${2:-3}" && $state == Synced && $status == Primary ]]
}

# _gal_primary N: node N answers and is Synced in a Primary component (of any size).
_gal_primary() {
    local out size state status
    out="$(_gal_wsrep "$1")" || return 1
    read -r size state status <<<"$out"
    [[ $state == Synced && $status == Primary ]]
}

_gal_bound() { [[ -n "$(ss -ltnH "sport = :$1" 2>/dev/null)" ]]; }

_gal_ports() { echo "$(_gal_port "$1") $(_gal_gcomm "$1") $(_gal_ist "$1") $(_gal_sst "$1")"; }

# _gal_ports_free N SECONDS: until none of node N's ports is bound.
_gal_ports_free() {
    local n="$1" secs="$2" i p busy
    for ((i = 0; i <= secs * 10; i++)); do
        busy=""
        for p in $(_gal_ports "$n"); do
            _gal_bound "$p" && busy="$busy $p"
        done
        [[ -z $busy ]] && return 0
        sleep 0.1
    done
    _gal_log "node $n: port(s)$busy still bound after ${secs}s, by: $(for p in $busy; do ss -ltnpH "sport = :$p"; done | tr -s ' \n' ' ')"
    return 1
}

_gal_tail() {
    local d
    d="$(_gal_dir "$1")"
    {
        echo "----- last lines of $d/mariadbd.log"
        tail -n 40 "$d/mariadbd.log" 2>/dev/null || echo "(no log)"
        echo "-----"
    } >&2
}

# _gal_launch N [--wsrep-new-cluster]: start node N's mariadbd in the background.
_gal_launch() {
    local n="$1" d user_opt=() addr="" m
    shift
    d="$(_gal_dir "$n")"
    for m in "${GAL_NODES[@]}"; do addr="$addr${addr:+,}127.0.0.1:$(_gal_gcomm "$m")"; done
    [[ $EUID -eq 0 ]] && user_opt=(--user=mysql)
    rm -f "$d/mariadbd.pid" "$d/mysqld.sock" "$d/mysqld.sock.lock"
    # The SST scripts find mariadbd's options in its command line (--no-defaults: no my.cnf).
    start-stop-daemon --start --quiet --background --make-pidfile --pidfile "$d/mariadbd.pid" \
        --exec "$_GAL_MARIADBD" -- --no-defaults "${user_opt[@]}" \
        --datadir="$d/data" --socket="$d/mysqld.sock" --pid-file="$d/mariadbd.server.pid" \
        --port="$(_gal_port "$n")" --bind-address=127.0.0.1 --skip-name-resolve \
        --log-error="$d/mariadbd.log" \
        --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
        --max-connections=300 --innodb-buffer-pool-size=128M --innodb-log-file-size=48M \
        --innodb-flush-log-at-trx-commit=2 --innodb-doublewrite=0 \
        --innodb-buffer-pool-dump-at-shutdown=0 --innodb-buffer-pool-load-at-startup=0 \
        --binlog-format=ROW --default-storage-engine=InnoDB --innodb-autoinc-lock-mode=2 \
        --wsrep-on=ON --wsrep-provider="$GAL_PROVIDER" --wsrep-cluster-name=oe_galera \
        --wsrep-cluster-address="gcomm://$addr" --wsrep-node-name="node$n" \
        --wsrep-node-address="127.0.0.1:$(_gal_gcomm "$n")" \
        --wsrep-node-incoming-address="127.0.0.1:$(_gal_port "$n")" \
        --wsrep-sst-method=rsync --wsrep-sst-receive-address="127.0.0.1:$(_gal_sst "$n")" \
        --wsrep-provider-options="gmcast.listen_addr=tcp://127.0.0.1:$(_gal_gcomm "$n");ist.recv_addr=127.0.0.1:$(_gal_ist "$n");gcache.size=128M;evs.keepalive_period=PT0.5S;evs.suspect_timeout=PT2S;evs.inactive_timeout=PT4S;evs.install_timeout=PT4S" \
        --wsrep-slave-threads=2 \
        "$@" 9>&-
}

# _gal_await N SECONDS [SIZE]: until node N is Synced in a Primary component of SIZE nodes;
# give up early when its mariadbd exits.
_gal_await() {
    local n="$1" secs="$2" size="${3:-}" deadline=$((SECONDS + $2)) pid
    while ((SECONDS < deadline)); do
        if [[ -n $size ]]; then _gal_synced "$n" "$size" && return 0; else _gal_primary "$n" && return 0; fi
        sleep 0.2
        if ! pid="$(gal_pid "$n")"; then
            sleep 0.5 # start-stop-daemon writes the pidfile after the fork
            if ! gal_pid "$n" >/dev/null; then
                _gal_log "node $n: mariadbd exited before it was Synced"
                _gal_tail "$n"
                return 1
            fi
        fi
    done
    _gal_log "node $n: not Synced${size:+ in a cluster of $size} after ${secs}s (wsrep: $(_gal_wsrep "$n" | tr '\t' ' '))"
    _gal_tail "$n"
    return 1
}

# _gal_init N: a fresh datadir for node N (the bootstrap node only: joiners get theirs by SST).
_gal_init() {
    local n="$1" d user_opt=()
    d="$(_gal_dir "$n")"
    [[ $EUID -eq 0 ]] && user_opt=(--user=mysql)
    rm -rf "$d/data"
    _gal_mkdirs "$n" || return 1
    "$_GAL_INSTALL_DB" --no-defaults "${user_opt[@]}" --datadir="$d/data" \
        --auth-root-authentication-method=socket --skip-test-db \
        >"$d/install.log" 2>&1 || {
        tail -n 20 "$d/install.log" >&2
        _gal_log "node $n: mariadb-install-db failed (log: $d/install.log)"
        return 1
    }
}

# _gal_mkdirs N: node N's directories. As root the nodes run as user mysql, not root as the single
# MariaDB does: the joiner's rsync daemon, started by root, would drop to user nobody and could
# not write the datadir.
_gal_mkdirs() {
    local d
    d="$(_gal_dir "$1")"
    mkdir -p "$d/data" || return 1
    [[ $EUID -eq 0 ]] || return 0
    id mysql >/dev/null 2>&1 || { _gal_log "no OS user mysql (is mariadb-server installed?)"; return 1; }
    chmod 755 "$(dirname "$(_gal_state)")" "$(_gal_state)" 2>/dev/null || true
    chown -R mysql: "$d"
    runuser -u mysql -- test -w "$d/data" || {
        _gal_log "user mysql cannot reach $d; choose an OE_STATE_DIR every user can traverse (e.g. under /tmp)"
        return 1
    }
}

_gal_setup() {
    _gal_root "$1" <<'SQL'
CREATE USER IF NOT EXISTS 'oe'@'127.0.0.1' IDENTIFIED BY 'oe';
CREATE USER IF NOT EXISTS 'oe'@'localhost' IDENTIFIED BY 'oe';
GRANT ALL PRIVILEGES ON *.* TO 'oe'@'127.0.0.1' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON *.* TO 'oe'@'localhost' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS oe CHARACTER SET utf8mb4;
SQL
}

# _gal_recover N: after a crash (grastate.dat's seqno is -1) print node N's last committed
# position (uuid:seqno) as InnoDB has it, read by mariadbd --wsrep-recover, as mysqld_safe does:
# started with it, the node asks for an IST of what it missed, not a full SST.
_gal_recover() {
    local n="$1" d user_opt=() line
    d="$(_gal_dir "$n")"
    grep -q '^seqno: *-1' "$d/data/grastate.dat" 2>/dev/null || return 0
    [[ $EUID -eq 0 ]] && user_opt=(--user=mysql)
    timeout 60 "$_GAL_MARIADBD" --no-defaults "${user_opt[@]}" --datadir="$d/data" \
        --socket="$d/recover.sock" --pid-file="$d/recover.pid" --skip-networking \
        --log-error="$d/recover.log" --innodb-buffer-pool-size=128M --innodb-log-file-size=48M \
        --binlog-format=ROW --wsrep-on=ON --wsrep-provider="$GAL_PROVIDER" --wsrep-recover \
        --wsrep-cluster-address="gcomm://127.0.0.1:$(_gal_gcomm 1)" --wsrep-sst-method=rsync \
        </dev/null >/dev/null 2>&1 9>&- || return 0
    line="$(grep -o 'WSREP: Recovered position: [0-9a-f-]*:[0-9-]*' "$d/recover.log" | tail -n1)"
    line="${line##* }"
    [[ $line == *:-1 || -z $line ]] || echo "$line"
}

# _gal_safe N: node N's grastate.dat says it may bootstrap (it was the last one down, cleanly).
_gal_safe() { grep -q '^safe_to_bootstrap: *1' "$(_gal_dir "$1")/data/grastate.dat" 2>/dev/null; }

# _gal_kill N: stop node N (TERM, then KILL after GAL_STOP_TIMEOUT) and wait for its ports.
_gal_kill() {
    local n="$1" pid i
    if pid="$(gal_pid "$n")"; then
        kill -TERM "$pid" 2>/dev/null
        for ((i = 0; i < GAL_STOP_TIMEOUT * 10; i++)); do
            _gal_alive "$pid" || break
            sleep 0.1
        done
        if _gal_alive "$pid"; then
            _gal_log "node $n (pid $pid) still running ${GAL_STOP_TIMEOUT}s after TERM; sending KILL"
            kill -KILL "$pid" 2>/dev/null
            for ((i = 0; i < 100; i++)); do
                _gal_alive "$pid" || break
                sleep 0.1
            done
            _gal_alive "$pid" && { _gal_log "node $n (pid $pid) did not exit"; return 1; }
        fi
    fi
    rm -f "$(_gal_dir "$n")/mariadbd.pid"
    _gal_ports_free "$n" 20
}

gal_stop() {
    local rc=0 n
    _gal_bins
    for n in 3 2 1; do _gal_kill "$n" || rc=1; done
    return "$rc"
}

gal_start() {
    local t0=$SECONDS n all=1 boot="" primary=""
    _gal_install || return 1
    mkdir -p "$(_gal_state)"
    for n in "${GAL_NODES[@]}"; do
        mkdir -p "$(_gal_dir "$n")"
        if gal_pid "$n" >/dev/null && _gal_synced "$n" 3; then
            [[ -n $primary ]] || primary=$n
        else
            all=0
            gal_pid "$n" >/dev/null && _gal_primary "$n" && { [[ -n $primary ]] || primary=$n; }
        fi
    done
    if ((all)); then
        _gal_setup 1 || return 1
        _gal_log "reusing nodes on 127.0.0.1:$(_gal_port 1)-$(_gal_port 3) (pids $(gal_pid 1) $(gal_pid 2) $(gal_pid 3))"
        return 0
    fi
    if [[ -z $primary ]]; then
        # No node serves a Primary component: start afresh. The node that was the last one down
        # cleanly bootstraps on its data (the others rejoin by IST); without one, a new cluster.
        gal_stop || { _gal_log "not starting: a node of the last start is still there"; return 1; }
        for n in "${GAL_NODES[@]}"; do
            _gal_safe "$n" && [[ -d $(_gal_dir "$n")/data/mysql ]] && { boot=$n; break; }
        done
        if [[ -z $boot ]]; then
            boot=1
            for n in "${GAL_NODES[@]}"; do rm -rf "$(_gal_dir "$n")/data"; done
            _gal_log "node 1: initialising a new cluster"
            _gal_init 1 || return 1
        fi
        _gal_mkdirs "$boot" || return 1
        _gal_launch "$boot" --wsrep-new-cluster || { _gal_tail "$boot"; return 1; }
        _gal_await "$boot" "$GAL_READY_TIMEOUT" 1 || return 1
        _gal_setup "$boot" || { _gal_tail "$boot"; return 1; }
        primary=$boot
    fi
    # Joiners one at a time: two SSTs at once from one donor would make the second wait anyway.
    for n in "${GAL_NODES[@]}"; do
        if gal_pid "$n" >/dev/null && _gal_primary "$n"; then continue; fi
        _gal_kill "$n" || return 1
        _gal_mkdirs "$n" || return 1
        _gal_launch "$n" || { _gal_tail "$n"; return 1; }
        _gal_await "$n" "$GAL_READY_TIMEOUT" || return 1
    done
    for n in "${GAL_NODES[@]}"; do
        _gal_await "$n" 30 3 || return 1
    done
    _gal_setup "$primary" || return 1
    _gal_log "ready after $((SECONDS - t0))s: nodes 127.0.0.1:$(_gal_port 1)-$(_gal_port 3) (pids $(gal_pid 1) $(gal_pid 2) $(gal_pid 3)), Synced, cluster size 3; state in $(_gal_state)"
}

# gal_start_node N: node N again, joining the running cluster on the data it has.
gal_start_node() {
    local n="$1" t0=$SECONDS m ok=0
    [[ $n =~ ^[123]$ ]] || { _gal_log "no node '$n' (1, 2 or 3)"; return 1; }
    _gal_bins
    if gal_pid "$n" >/dev/null && _gal_primary "$n"; then return 0; fi
    for m in "${GAL_NODES[@]}"; do
        [[ $m != "$n" ]] && gal_pid "$m" >/dev/null && _gal_primary "$m" && ok=1
    done
    ((ok)) || { _gal_log "node $n: no other node serves a Primary component to join (start all: gal_start)"; return 1; }
    _gal_kill "$n" || return 1
    _gal_mkdirs "$n" || return 1
    local pos=()
    if pos=("$(_gal_recover "$n")") && [[ -n ${pos[0]} ]]; then
        pos=(--wsrep-start-position="${pos[0]}")
    else
        pos=()
    fi
    _gal_launch "$n" "${pos[@]}" || { _gal_tail "$n"; return 1; }
    _gal_await "$n" "$GAL_READY_TIMEOUT" || return 1
    _gal_log "node $n: rejoined and Synced after $((SECONDS - t0))s (${pos[*]:-no recovered position}; $(grep -o -E 'IST received|SST received' "$(_gal_dir "$n")/mariadbd.log" | tail -n1))"
}

gal_status() {
    local n pid ok=0 w
    _gal_bins
    for n in "${GAL_NODES[@]}"; do
        if pid="$(gal_pid "$n")" && w="$(_gal_wsrep "$n")"; then
            echo "node $n: pid $pid on 127.0.0.1:$(_gal_port "$n"): cluster size, state, status: $(tr '\t' ' ' <<<"$w")"
            _gal_synced "$n" 3 || ok=1
        else
            echo "node $n: not running"
            ok=1
        fi
    done
    return "$ok"
}

gal_dsns() {
    local n out=""
    for n in "${GAL_NODES[@]}"; do out="$out${out:+,}oe:oe@tcp(127.0.0.1:$(_gal_port "$n"))/oe"; done
    echo "$out"
}

gal_env() {
    echo "export OE_GALERA_DSNS='$(gal_dsns)'"
    echo "export OE_GALERA_SH='$_GAL_SRC_DIR/galera.sh'"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -euo pipefail
    case "${1:-}" in
        start) gal_start ;;
        stop) gal_stop ;;
        status) gal_status ;;
        env) gal_env ;;
        start-node) gal_start_node "${2:?start-node N}" ;;
        pid) gal_pid "${2:?pid N}" ;;
        *)
            echo "usage: bash $0 start|stop|status|env|start-node N|pid N" >&2
            exit 2
            ;;
    esac
fi
