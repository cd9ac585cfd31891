# shellcheck shell=bash
# patroni.sh — PostgreSQL with streaming replication under Patroni and one etcd, on loopback,
# for the integration tests.
#
# Sourced by internal/testenv/services.sh, it defines:
#   pat_start   start etcd and three Patroni-managed PostgreSQL nodes (or reuse them when all
#               answer, one leader and two streaming replicas); the first Patroni to take the
#               leader key runs initdb, the others clone it with pg_basebackup
#   pat_stop    stop every Patroni by pid (TERM: Patroni stops its PostgreSQL), then etcd; KILL
#               what is still there after PAT_STOP_TIMEOUT; return once each is gone and its
#               ports are free
#   pat_status  one line per node (role, state, lag, timeline); exit 0 when one node leads and
#               two replicas stream from it
#   pat_env     print OE_PATRONI_DSN (a multi-host pgx DSN with target_session_attrs=read-write),
#               OE_PATRONI_REST (the nodes' REST API addresses, comma-separated, node order) and
#               OE_PATRONI_SH (this script, for the tests that kill and restart a node)
#   pat_start_node N  start node N's Patroni again on the data it has (it rejoins as a replica,
#               rewound with pg_rewind when its timeline diverged) and wait until it streams
#   pat_pids N  print node N's Patroni pid and its postmaster's pid (exit 1: Patroni not running)
#   pat_leader  print the number of the node that holds the leader key
# Executed, it runs one of them:
#   bash internal/testenv/patroni.sh start|stop|status|env|start-node N|pids N|leader
#
# Node N (1..3): PostgreSQL on PAT_PG_BASE+N-1 (15441-15443), Patroni's REST API on
# PAT_REST_BASE+N-1 (18441-18443); etcd's client port PAT_ETCD_PORT (12379) and peer port +1
# (12380); all on 127.0.0.1. Roles: postgres (superuser, trust over loopback), replicator
# (replication), oe/oe (SUPERUSER) owning database oe. Patroni runs as the OS user postgres.
# State: ${OE_STATE_DIR:-/tmp/orderexpiry-services}/patroni/{etcd,nodeN/{data,patroni.yml,
# patroni.log}}. Data survives stop; tests create (and drop) their own databases.
#
# Timing is short for tests: ttl 6s, loop_wait 1s, retry_timeout 2s, so a dead leader's key
# expires and a replica is promoted within about ttl. Replication starts asynchronous; a test
# switches synchronous_mode on and off through the REST API (PATCH /config). fsync is off (the
# tests SIGKILL processes, they never cut the power), wal_log_hints is on for pg_rewind.

_PAT_SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

PAT_PG_BASE="${PAT_PG_BASE:-15441}"
PAT_REST_BASE="${PAT_REST_BASE:-18441}"
PAT_ETCD_PORT="${PAT_ETCD_PORT:-12379}"
PAT_READY_TIMEOUT="${PAT_READY_TIMEOUT:-120}"
PAT_STOP_TIMEOUT="${PAT_STOP_TIMEOUT:-30}"
PAT_SCOPE="${PAT_SCOPE:-oe_patroni}"
PAT_NODES=(1 2 3)

_pat_state() { echo "${OE_STATE_DIR:-/tmp/orderexpiry-services}/patroni"; }
_pat_dir() { echo "$(_pat_state)/node$1"; }
_pat_port() { echo $((PAT_PG_BASE + $1 - 1)); }
_pat_rest() { echo $((PAT_REST_BASE + $1 - 1)); }
_pat_log() { echo "patroni: $*" >&2; }

_PAT_PGBIN="" _PAT_PATRONI="" _PAT_ETCD=""
_pat_bins() {
    local v
    _PAT_PGBIN=""
    for v in $(ls /usr/lib/postgresql 2>/dev/null | sort -rn); do
        [[ -x /usr/lib/postgresql/$v/bin/postgres ]] && { _PAT_PGBIN="/usr/lib/postgresql/$v/bin"; break; }
    done
    _PAT_PATRONI="$(command -v patroni || true)"
    _PAT_ETCD="$(command -v etcd || true)"
}

# _pat_install: patroni, etcd-server (etcd) and etcd-client (etcdctl, for diagnostics) from
# Debian, postgresql when missing (services.sh installs it itself); curl for the REST API.
_pat_install() {
    _pat_bins
    local pkgs=()
    [[ -n $_PAT_PGBIN ]] || pkgs+=(postgresql)
    [[ -n $_PAT_PATRONI ]] || pkgs+=(patroni)
    [[ -n $_PAT_ETCD ]] || pkgs+=(etcd-server)
    command -v etcdctl >/dev/null || pkgs+=(etcd-client)
    command -v curl >/dev/null || pkgs+=(curl)
    command -v ss >/dev/null || pkgs+=(iproute2)
    ((${#pkgs[@]} == 0)) && return 0
    [[ $EUID -eq 0 ]] || { _pat_log "missing packages: ${pkgs[*]} (run as root, or install them)"; return 1; }
    _pat_log "installing: ${pkgs[*]}"
    local state policy=/usr/sbin/policy-rc.d made=0 rc=0
    state="$(_pat_state)"
    mkdir -p "$state"
    if [[ ! -e $policy ]]; then # no system-wide etcd or patroni started by the packages' scripts
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
        _pat_log "apt-get failed (exit $rc) installing ${pkgs[*]}"
        return 1
    fi
    _pat_bins
    [[ -n $_PAT_PGBIN && -n $_PAT_PATRONI && -n $_PAT_ETCD ]]
}

_pat_alive() {
    local st
    st="$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)" || return 1
    [[ -n $st && $st != Z && $st != X ]]
}

# _pat_pidfile_pid FILE PATTERN: the pid in FILE when alive and its command line contains PATTERN.
_pat_pidfile_pid() {
    local pid cmd
    [[ -s $1 ]] || return 1
    pid="$(head -n1 "$1" 2>/dev/null | tr -dc '0-9')"
    [[ -n $pid ]] && _pat_alive "$pid" || return 1
    cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    [[ $cmd == *"$2"* ]] || return 1
    echo "$pid"
}

_pat_etcd_pid() { _pat_pidfile_pid "$(_pat_state)/etcd/etcd.pid" "--data-dir $(_pat_state)/etcd/data"; }
_pat_patroni_pid() { _pat_pidfile_pid "$(_pat_dir "$1")/patroni.pid" "$(_pat_dir "$1")/patroni.yml"; }
_pat_postmaster_pid() { _pat_pidfile_pid "$(_pat_dir "$1")/data/postmaster.pid" "$(_pat_dir "$1")/data"; }

pat_pids() {
    local p m
    p="$(_pat_patroni_pid "$1")" || return 1
    m="$(_pat_postmaster_pid "$1")" || m=""
    echo "$p $m"
}

_pat_bound() { [[ -n "$(ss -ltnH "sport = :$1" 2>/dev/null)" ]]; }

# _pat_ports_free SECONDS PORT...: until none of the ports is bound.
_pat_ports_free() {
    local secs="$1" i p busy
    shift
    for ((i = 0; i <= secs * 10; i++)); do
        busy=""
        for p in "$@"; do _pat_bound "$p" && busy="$busy $p"; done
        [[ -z $busy ]] && return 0
        sleep 0.1
    done
    _pat_log "port(s)$busy still bound after ${secs}s, by: $(for p in $busy; do ss -ltnpH "sport = :$p"; done | tr -s ' \n' ' ')"
    return 1
}

# _pat_get N PATH: GET from node N's REST API (body on stdout, fails on no answer).
_pat_get() { curl -s -m 3 "http://127.0.0.1:$(_pat_rest "$1")$2"; }

# _pat_code N PATH: the HTTP status of a GET (000: no answer).
_pat_code() { curl -s -o /dev/null -m 3 -w '%{http_code}' "http://127.0.0.1:$(_pat_rest "$1")$2" || true; }

# _pat_cluster: GET /cluster from the first node that answers.
_pat_cluster() {
    local n
    for n in "${PAT_NODES[@]}"; do _pat_get "$n" /cluster 2>/dev/null && return 0; done
    return 1
}

# _pat_members: one line per member from /cluster: "name role state lag timeline".
_pat_members() {
    _pat_cluster | /usr/bin/python3 -c '
import json, sys
for m in json.load(sys.stdin).get("members", []):
    print(m.get("name"), m.get("role"), m.get("state"), m.get("lag", "-"), m.get("timeline", "-"))
' 2>/dev/null
}

pat_leader() {
    local n
    for n in "${PAT_NODES[@]}"; do
        [[ $(_pat_code "$n" /primary) == 200 ]] && { echo "$n"; return 0; }
    done
    return 1
}

# _pat_healthy: one leader running, two replicas streaming (or running), all on one timeline.
_pat_healthy() {
    local out leaders=0 replicas=0 name role state lag tl
    out="$(_pat_members)" || return 1
    while read -r name role state lag tl; do
        case "$role" in
            leader) [[ $state == running ]] && leaders=$((leaders + 1)) ;;
            replica | sync_standby) [[ $state == streaming || $state == running ]] && replicas=$((replicas + 1)) ;;
        esac
    done <<<"$out"
    ((leaders == 1 && replicas == 2)) || return 1
    # Patroni 3.0 says "running" of a replica that may not stream yet: ask the leader.
    local l
    l="$(pat_leader)" || return 1
    [[ $(TMO=5 _pat_psql "$l" -tAc "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'" 2>/dev/null) == 2 ]]
}

_pat_psql() { # N ARGS...: psql as postgres on node N over TCP
    local n="$1"
    shift
    PGCONNECT_TIMEOUT=3 timeout "${TMO:-30}" "$_PAT_PGBIN/psql" -X -q -v ON_ERROR_STOP=1 \
        -h 127.0.0.1 -p "$(_pat_port "$n")" -U postgres -d postgres "$@"
}

_pat_tail() {
    local d
    d="$(_pat_dir "$1")"
    {
        echo "----- last lines of $d/patroni.log"
        tail -n 30 "$d/patroni.log" 2>/dev/null || echo "(no log)"
        echo "----- last lines of $d/data/log (postgres)"
        tail -n 15 "$(ls -t "$d"/data/log/*.log 2>/dev/null | head -n1)" 2>/dev/null || echo "(no log)"
        echo "-----"
    } >&2
}

_pat_etcd_start() {
    local d pid
    d="$(_pat_state)/etcd"
    if pid="$(_pat_etcd_pid)"; then
        ETCDCTL_API=3 timeout 5 etcdctl --endpoints="127.0.0.1:$PAT_ETCD_PORT" endpoint health >/dev/null 2>&1 && return 0
        _pat_log "etcd (pid $pid) does not answer; restarting it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    _pat_ports_free 10 "$PAT_ETCD_PORT" $((PAT_ETCD_PORT + 1)) || return 1
    mkdir -p "$d"
    rm -f "$d/etcd.pid"
    # Lease TTLs down to 2s need no tuning: etcd's minimum follows its election timeout (1s).
    start-stop-daemon --start --quiet --background --make-pidfile --pidfile "$d/etcd.pid" \
        --output "$d/etcd.log" --exec "$_PAT_ETCD" -- --name oe-etcd --data-dir "$d/data" \
        --listen-client-urls "http://127.0.0.1:$PAT_ETCD_PORT" \
        --advertise-client-urls "http://127.0.0.1:$PAT_ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$((PAT_ETCD_PORT + 1))" \
        --initial-advertise-peer-urls "http://127.0.0.1:$((PAT_ETCD_PORT + 1))" \
        --initial-cluster "oe-etcd=http://127.0.0.1:$((PAT_ETCD_PORT + 1))" \
        --enable-v2=false --quota-backend-bytes=268435456 --auto-compaction-retention=1 \
        --log-level=warn 9>&- || return 1
    local i
    for ((i = 0; i < 200; i++)); do
        ETCDCTL_API=3 timeout 3 etcdctl --endpoints="127.0.0.1:$PAT_ETCD_PORT" endpoint health >/dev/null 2>&1 && return 0
        sleep 0.1
        if ((i > 10)) && ! _pat_etcd_pid >/dev/null; then break; fi
    done
    _pat_log "etcd did not answer on 127.0.0.1:$PAT_ETCD_PORT"
    tail -n 20 "$d/etcd.log" >&2 2>/dev/null
    return 1
}

# _pat_config N: node N's patroni.yml.
_pat_config() {
    local n="$1" d
    d="$(_pat_dir "$n")"
    cat >"$d/patroni.yml" <<EOF
scope: $PAT_SCOPE
namespace: /oe/
name: node$n
log:
  level: WARNING
  dir: $d
  file_num: 2
  file_size: 10485760
restapi:
  listen: 127.0.0.1:$(_pat_rest "$n")
  connect_address: 127.0.0.1:$(_pat_rest "$n")
etcd3:
  hosts: 127.0.0.1:$PAT_ETCD_PORT
bootstrap:
  dcs:
    ttl: 6
    loop_wait: 1
    retry_timeout: 2
    maximum_lag_on_failover: 1073741824
    synchronous_mode: false
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        max_connections: 200
        shared_buffers: 64MB
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 256MB
        fsync: "off"
        full_page_writes: "on" # pg_rewind needs it on the source, else a rejoin falls back to a full copy
        synchronous_commit: "on"
        logging_collector: "on"
        log_directory: log
        log_min_messages: warning
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8
    - auth-local: trust
    - auth-host: trust
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication replicator 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$(_pat_port "$n")
  connect_address: 127.0.0.1:$(_pat_port "$n")
  data_dir: $d/data
  bin_dir: $_PAT_PGBIN
  pgpass: $d/pgpass
  remove_data_directory_on_rewind_failure: true
  remove_data_directory_on_diverged_timelines: true
  authentication:
    superuser:
      username: postgres
    replication:
      username: replicator
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: $d
  basebackup:
    - checkpoint: fast
tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
  nosync: false
EOF
}

# _pat_mkdirs N: node N's directory, the OS user postgres's (PostgreSQL refuses to run as root).
_pat_mkdirs() {
    local d
    d="$(_pat_dir "$1")"
    mkdir -p "$d"
    [[ $EUID -eq 0 ]] || return 0
    id postgres >/dev/null 2>&1 || { _pat_log "no OS user postgres (is postgresql installed?)"; return 1; }
    chmod 755 "$(dirname "$(_pat_state)")" "$(_pat_state)" 2>/dev/null || true
    chown postgres: "$d"
    [[ -d $d/data ]] && chown -R postgres: "$d/data"
    runuser -u postgres -- test -w "$d" || {
        _pat_log "user postgres cannot reach $d; choose an OE_STATE_DIR every user can traverse (e.g. under /tmp)"
        return 1
    }
}

# _pat_launch N: start node N's Patroni in the background (as postgres when root).
_pat_launch() {
    local n="$1" d user_opt=()
    d="$(_pat_dir "$n")"
    _pat_mkdirs "$n" || return 1
    _pat_config "$n"
    [[ $EUID -eq 0 ]] && { chown postgres: "$d/patroni.yml"; user_opt=(--chuid postgres); }
    rm -f "$d/patroni.pid"
    start-stop-daemon --start --quiet --background --make-pidfile --pidfile "$d/patroni.pid" \
        "${user_opt[@]}" --chdir "$d" --output "$d/patroni.out" \
        --exec /usr/bin/python3 -- "$_PAT_PATRONI" "$d/patroni.yml" 9>&-
}

# _pat_kill N: stop node N (TERM Patroni, which stops PostgreSQL; KILL both after the timeout).
_pat_kill() {
    local n="$1" pid pm i d
    d="$(_pat_dir "$n")"
    pm="$(_pat_postmaster_pid "$n")" || pm=""
    if pid="$(_pat_patroni_pid "$n")"; then
        kill -TERM "$pid" 2>/dev/null
        for ((i = 0; i < PAT_STOP_TIMEOUT * 10; i++)); do
            _pat_alive "$pid" || break
            sleep 0.1
        done
        if _pat_alive "$pid"; then
            _pat_log "node $n: Patroni (pid $pid) still running ${PAT_STOP_TIMEOUT}s after TERM; sending KILL"
            kill -KILL "$pid" 2>/dev/null
        fi
    fi
    # A postmaster left behind (Patroni killed, or it died): fast shutdown, then KILL.
    [[ -n $pm ]] || pm="$(_pat_postmaster_pid "$n")" || pm=""
    if [[ -n $pm ]] && _pat_alive "$pm"; then
        kill -INT "$pm" 2>/dev/null
        for ((i = 0; i < PAT_STOP_TIMEOUT * 10; i++)); do
            _pat_alive "$pm" || break
            sleep 0.1
        done
        _pat_alive "$pm" && kill -KILL "$pm" 2>/dev/null
    fi
    for ((i = 0; i < 100; i++)); do
        { [[ -n ${pid:-} ]] && _pat_alive "$pid"; } || { [[ -n $pm ]] && _pat_alive "$pm"; } || break
        sleep 0.1
    done
    rm -f "$d/patroni.pid"
    _pat_ports_free 20 "$(_pat_port "$n")" "$(_pat_rest "$n")"
}

pat_stop() {
    local rc=0 n pid i
    _pat_bins
    local order=() l
    l="$(pat_leader 2>/dev/null)" || l=""
    for n in 3 2 1; do [[ $n != "$l" ]] && order+=("$n"); done
    [[ -n $l ]] && order+=("$l")
    # The replicas together (each Patroni takes seconds to stop), the leader last.
    local pids=() p
    for n in "${order[@]}"; do
        [[ $n == "$l" ]] && continue
        _pat_kill "$n" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    [[ -n $l ]] && { _pat_kill "$l" || rc=1; }
    if pid="$(_pat_etcd_pid)"; then
        kill -TERM "$pid" 2>/dev/null
        for ((i = 0; i < 100; i++)); do
            _pat_alive "$pid" || break
            sleep 0.1
        done
        _pat_alive "$pid" && kill -KILL "$pid" 2>/dev/null
    fi
    rm -f "$(_pat_state)/etcd/etcd.pid"
    _pat_ports_free 10 "$PAT_ETCD_PORT" $((PAT_ETCD_PORT + 1)) || rc=1
    return "$rc"
}

# _pat_setup: the test role and database, on the leader.
_pat_setup() {
    local l
    l="$(pat_leader)" || return 1
    TMO=20 _pat_psql "$l" <<'SQL'
SELECT 'CREATE ROLE oe LOGIN SUPERUSER PASSWORD ''oe''' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'oe')\gexec
SELECT 'CREATE DATABASE oe OWNER oe' WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'oe')\gexec
SQL
}

# _pat_await SECONDS: until the cluster is healthy; give up early when a Patroni exits.
_pat_await() {
    local secs="$1" deadline=$((SECONDS + $1)) n
    while ((SECONDS < deadline)); do
        _pat_healthy && return 0
        sleep 0.2
        for n in "${PAT_NODES[@]}"; do
            if ! _pat_patroni_pid "$n" >/dev/null; then
                sleep 0.5
                _pat_patroni_pid "$n" >/dev/null && continue
                _pat_log "node $n: Patroni exited before the cluster was ready"
                tail -n 20 "$(_pat_dir "$n")/patroni.out" >&2 2>/dev/null
                _pat_tail "$n"
                return 1
            fi
        done
    done
    _pat_log "cluster not ready after ${secs}s; members: $(_pat_members | tr '\n' ';')"
    for n in "${PAT_NODES[@]}"; do _pat_tail "$n"; done
    return 1
}

pat_start() {
    local t0=$SECONDS n
    _pat_install || return 1
    mkdir -p "$(_pat_state)"
    if _pat_etcd_pid >/dev/null && _pat_healthy; then
        local all=1
        for n in "${PAT_NODES[@]}"; do _pat_patroni_pid "$n" >/dev/null || all=0; done
        if ((all)); then
            _pat_setup || return 1
            _pat_log "reusing nodes on 127.0.0.1:$(_pat_port 1)-$(_pat_port 3) (leader node $(pat_leader))"
            return 0
        fi
    fi
    _pat_etcd_start || return 1
    for n in "${PAT_NODES[@]}"; do
        _pat_patroni_pid "$n" >/dev/null && continue
        _pat_kill "$n" || return 1
        _pat_launch "$n" || { _pat_tail "$n"; return 1; }
    done
    _pat_await "$PAT_READY_TIMEOUT" || return 1
    _pat_setup || return 1
    _pat_log "ready after $((SECONDS - t0))s: nodes 127.0.0.1:$(_pat_port 1)-$(_pat_port 3) (REST $(_pat_rest 1)-$(_pat_rest 3)), leader node $(pat_leader), two replicas streaming; state in $(_pat_state)"
}

# pat_start_node N: node N's Patroni again, on its data; it rejoins as a replica.
pat_start_node() {
    local n="$1" t0=$SECONDS
    [[ $n =~ ^[123]$ ]] || { _pat_log "no node '$n' (1, 2 or 3)"; return 1; }
    _pat_bins
    _pat_etcd_start || return 1
    if ! _pat_patroni_pid "$n" >/dev/null; then
        _pat_kill "$n" || return 1
        _pat_launch "$n" || { _pat_tail "$n"; return 1; }
    fi
    _pat_await "$PAT_READY_TIMEOUT" || return 1
    _pat_log "node $n: back after $((SECONDS - t0))s; members: $(_pat_members | tr '\n' ';')"
}

pat_status() {
    local n pid ok=0 out
    _pat_bins
    if pid="$(_pat_etcd_pid)"; then echo "etcd: pid $pid on 127.0.0.1:$PAT_ETCD_PORT"; else
        echo "etcd: not running"
        ok=1
    fi
    out="$(_pat_members)" || out=""
    for n in "${PAT_NODES[@]}"; do
        if pid="$(_pat_patroni_pid "$n")"; then
            echo "node $n: Patroni pid $pid, PostgreSQL 127.0.0.1:$(_pat_port "$n"), REST $(_pat_rest "$n"): $(grep "^node$n " <<<"$out" | cut -d' ' -f2- || echo 'no member entry') (role state lag timeline)"
        else
            echo "node $n: not running"
            ok=1
        fi
    done
    _pat_healthy || ok=1
    return "$ok"
}

pat_dsn() {
    local n hosts=""
    for n in "${PAT_NODES[@]}"; do hosts="$hosts${hosts:+,}127.0.0.1:$(_pat_port "$n")"; done
    echo "postgres://oe:oe@$hosts/oe?sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
}

pat_env() {
    local n rest=""
    for n in "${PAT_NODES[@]}"; do rest="$rest${rest:+,}127.0.0.1:$(_pat_rest "$n")"; done
    echo "export OE_PATRONI_DSN='$(pat_dsn)'"
    echo "export OE_PATRONI_REST='$rest'"
    echo "export OE_PATRONI_SH='$_PAT_SRC_DIR/patroni.sh'"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -euo pipefail
    case "${1:-}" in
        start) pat_start ;;
        stop) pat_stop ;;
        status) pat_status ;;
        env) pat_env ;;
        start-node) pat_start_node "${2:?start-node N}" ;;
        pids) pat_pids "${2:?pids N}" ;;
        leader) pat_leader ;;
        *)
            echo "usage: bash $0 start|stop|status|env|start-node N|pids N|leader" >&2
            exit 2
            ;;
    esac
fi
