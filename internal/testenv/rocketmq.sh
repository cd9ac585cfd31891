# shellcheck shell=bash
# RocketMQ 5.3.3 (name server + one broker, or two) on loopback for the integration tests.
#
# Sourced by internal/testenv/services.sh, it defines:
#   rmq_start  build the jar folder if needed, start the JVMs (or reuse them when
#              alive and answering), wait until a real send succeeds on every broker,
#              and export OE_ROCKETMQ_NAMESRV=127.0.0.1:19876
#   rmq_stop   stop every JVM by pid (TERM, wait, then KILL), and return once each is gone and
#              its ports are free (exit 1 when one is not: the next start would fail)
#   rmq_start_broker NAME  start one broker (broker or broker-b) on the store it has,
#              and wait until a send to it succeeds: the restart after a fault
# Executed, it runs one of them:
#   bash internal/testenv/rocketmq.sh start|stop|status|start-broker NAME|pid NAME
#
# A second broker (brokerName broker-b, same name server and cluster) runs when
# RMQ_BROKER_B_PORT is set; services.sh sets it (20921), a private set started by a test
# (internal/faults) does not, and gets one broker.
#
# State (configs, pidfiles, logs, store) lives in ${OE_STATE_DIR:-/tmp/orderexpiry-services}/rocketmq.
# A fresh start wipes the previous store there, so no old delayed message turns up in a new run
# (RMQ_KEEP_STORE=1 keeps it, for restart tests).
# Ports: name server 19876; broker 20911 (plus 20909 and 20912, which the broker derives from it;
# 20912, the HA port, listens on all interfaces: the broker has no setting for its address);
# broker-b, when enabled, RMQ_BROKER_B_PORT (and its -2 and +1).
# Needs java 17, mvn and go on PATH; uses ss (iproute2), when there, to see who holds a port.

_RMQ_SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_RMQ_REPO_ROOT="$(cd "$_RMQ_SRC_DIR/../.." && pwd)"

RMQ_NAMESRV_PORT="${RMQ_NAMESRV_PORT:-19876}"
RMQ_BROKER_PORT="${RMQ_BROKER_PORT:-20911}"
RMQ_BROKER_B_PORT="${RMQ_BROKER_B_PORT:-}" # empty: no second broker
RMQ_READY_TIMEOUT="${RMQ_READY_TIMEOUT:-120}"
RMQ_DELAY_LEVELS="${RMQ_DELAY_LEVELS:-1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h}" # the broker's messageDelayLevel
RMQ_TIMER_WHEEL="${RMQ_TIMER_WHEEL:-true}" # the broker's timerWheelEnable (false: it refuses timer messages)
RMQ_STOP_TIMEOUT="${RMQ_STOP_TIMEOUT:-30}" # seconds a JVM gets after TERM before KILL

_rmq_state() { echo "${OE_STATE_DIR:-/tmp/orderexpiry-services}/rocketmq"; }
_rmq_libdir() { echo "$_RMQ_SRC_DIR/rocketmq/target/lib"; }
_rmq_log() { echo "rocketmq: $*" >&2; }

# _rmq_brokers: the broker JVMs' names (each has NAME.conf, NAME.pid, its own home).
_rmq_brokers() {
    echo broker
    [[ -z "$RMQ_BROKER_B_PORT" ]] || echo broker-b
}
_rmq_broker_port() { if [[ $1 == broker-b ]]; then echo "$RMQ_BROKER_B_PORT"; else echo "$RMQ_BROKER_PORT"; fi; }
_rmq_broker_name() { if [[ $1 == broker-b ]]; then echo broker-b; else echo broker-a; fi; }
_rmq_home() { if [[ $1 == broker-b ]]; then echo "$(_rmq_state)/home-b"; else echo "$(_rmq_state)/home"; fi; }

# _rmq_pid NAME: the pid in NAME.pid if that process is alive and is our JVM.
_rmq_pid() {
    local name="$1" state pid i
    state="$(_rmq_state)"
    [[ -s "$state/$name.pid" ]] || return 1
    pid="$(cat "$state/$name.pid")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    # A JVM being exec'd shows its launcher's command line (or none) for a moment: look again
    # before calling it someone else's (a JVM taken for gone is never stopped).
    for ((i = 0; i < 3; i++)); do
        _rmq_running "$pid" || return 1
        if _rmq_is_ours "$name" "$pid"; then
            echo "$pid"
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# _rmq_is_ours NAME PID: PID's command line names NAME's class and conf in our state
# directory (a guard against a reused pid, and against another set's JVM).
_rmq_is_ours() {
    local name="$1" pid="$2" cls cmd
    case "$name" in
        namesrv) cls=org.apache.rocketmq.namesrv.NamesrvStartup ;;
        broker | broker-b) cls=org.apache.rocketmq.broker.BrokerStartup ;;
        *) return 1 ;;
    esac
    # (No pipe into grep -q here: under pipefail its early exit can fail the pipe.)
    cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    [[ "$cmd" == *"$cls -c $(_rmq_state)/$name.conf"* ]]
}

# _rmq_ports NAME: the TCP ports NAME's JVM listens on, as its conf in our state directory says
# (none without a conf: then no JVM of this state directory can hold one). A broker also
# listens on listenPort-2 and listenPort+1 (HA, on every interface).
_rmq_ports() {
    local conf p
    conf="$(_rmq_state)/$1.conf"
    [[ -s "$conf" ]] || return 0
    p="$(sed -n 's/^listenPort=\([0-9]*\)$/\1/p' "$conf")"
    [[ -n "$p" ]] || return 0
    if [[ $1 == namesrv ]]; then echo "$p"; else echo "$p $((p - 2)) $((p + 1))"; fi
}

# _rmq_bound PORT: something listens on PORT, on any address (ss sees a listener that
# refuses or does not answer yet; without ss, whether loopback takes a connection).
_rmq_bound() {
    if command -v ss >/dev/null; then
        [[ -n "$(ss -ltnH "sport = :$1" 2>/dev/null)" ]]
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}

# _rmq_listeners PORT: the pids listening on PORT (none known without ss).
_rmq_listeners() {
    command -v ss >/dev/null || return 0
    ss -ltnpH "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u || true
}

# _rmq_holders NAME: who holds NAME's ports now, one ss line each, for an error message.
_rmq_holders() {
    local p
    command -v ss >/dev/null || return 0
    for p in $(_rmq_ports "$1"); do
        ss -ltnpH "sport = :$p" 2>/dev/null || true
    done
}

# _rmq_ports_free NAME SECONDS: until none of NAME's ports is bound; after SECONDS, say who
# holds them and fail.
_rmq_ports_free() {
    local name="$1" secs="$2" i p busy
    for ((i = 0; i <= secs * 10; i++)); do
        busy=""
        for p in $(_rmq_ports "$name"); do
            _rmq_bound "$p" && busy="$busy $p"
        done
        [[ -n "$busy" ]] || return 0
        sleep 0.1
    done
    _rmq_log "$name: port(s)$busy still bound after ${secs}s, by: $(_rmq_holders "$name" | tr -s ' \n' ' ')"
    return 1
}

_rmq_build_jars() {
    local lib state
    lib="$(_rmq_libdir)"
    state="$(_rmq_state)"
    # .complete marks a finished copy (an interrupted mvn leaves a partial folder).
    if [[ -f "$lib/.complete" ]]; then
        return 0
    fi
    command -v mvn >/dev/null || { _rmq_log "mvn not found (apt-get install -y maven)"; return 1; }
    command -v java >/dev/null || { _rmq_log "java not found (apt-get install -y openjdk-17-jdk-headless)"; return 1; }
    _rmq_log "fetching RocketMQ jars with Maven into $lib"
    mkdir -p "$state"
    # Offline first: a warm ~/.m2 needs no network at all.
    if ! mvn -B -q -o -f "$_RMQ_SRC_DIR/rocketmq/pom.xml" package >"$state/mvn.log" 2>&1; then
        mvn -B -q -f "$_RMQ_SRC_DIR/rocketmq/pom.xml" package >"$state/mvn.log" 2>&1 || {
            _rmq_log "mvn package failed; last lines of $state/mvn.log:"
            tail -n 30 "$state/mvn.log" >&2
            return 1
        }
    fi
    [[ -f "$lib/rocketmq-broker-5.3.3.jar" && -f "$lib/rocketmq-namesrv-5.3.3.jar" ]] || {
        _rmq_log "no broker or name server jar in $lib after mvn"
        return 1
    }
    touch "$lib/.complete"
}

_rmq_build_ready() {
    local state="$1"
    command -v go >/dev/null || { _rmq_log "go not found"; return 1; }
    (cd "$_RMQ_REPO_ROOT" && go build -o "$state/rmqready" ./internal/testenv/rmqready) || {
        _rmq_log "go build ./internal/testenv/rmqready failed"
        return 1
    }
}

_rmq_write_confs() {
    local state="$1"
    cat >"$state/namesrv.conf" <<EOF
listenPort=$RMQ_NAMESRV_PORT
bindAddress=127.0.0.1
EOF
    local b
    for b in $(_rmq_brokers); do
        _rmq_write_broker_conf "$state" "$b"
    done
}

# _rmq_write_broker_conf STATE NAME: NAME.conf; both brokers are masters of one cluster on
# one name server, each with its own store.
# timerFlushIntervalMs: every flush copies the whole timer wheel (604,800 slots, 38.7 MB, fixed in
# 5.3.3) into its mapped file and forces it. At the default 1 s that was a fifth of an idle
# broker's CPU, on a machine the tests keep busy. A longer interval loses nothing on a SIGKILL:
# the wheel and the timer checkpoint are flushed together, and a restart replays the timer log
# from the checkpoint (internal/faults and the soak kill brokers with timer messages in flight).
_rmq_write_broker_conf() {
    local state="$1" b="$2" home
    home="$(_rmq_home "$b")"
    cat >"$state/$b.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=$(_rmq_broker_name "$b")
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
namesrvAddr=127.0.0.1:$RMQ_NAMESRV_PORT
listenPort=$(_rmq_broker_port "$b")
brokerIP1=127.0.0.1
bindAddress=127.0.0.1
storePathRootDir=$home/store
storePathCommitLog=$home/store/commitlog
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
mappedFileSizeCommitLog=67108864
mappedFileSizeConsumeQueue=600000
mappedFileSizeTimerLog=16777216
timerFlushIntervalMs=10000
maxHashSlotNum=100000
maxIndexNum=400000
diskMaxUsedSpaceRatio=95
timerWheelEnable=$RMQ_TIMER_WHEEL
messageDelayLevel=$RMQ_DELAY_LEVELS
EOF
}

# _rmq_java NAME HOME CLASS LOGBACK HEAP...: start one JVM in the background.
_rmq_java() {
    local name="$1" home="$2" cls="$3" logback="$4" state
    shift 4
    state="$(_rmq_state)"
    nohup java -server "$@" \
        -XX:+UseG1GC -XX:-OmitStackTraceInFastThrow \
        --add-opens java.base/java.lang=ALL-UNNAMED \
        --add-opens java.base/java.nio=ALL-UNNAMED \
        --add-opens java.base/sun.nio.ch=ALL-UNNAMED \
        --add-exports java.base/sun.nio.ch=ALL-UNNAMED \
        -Drocketmq.home.dir="$home" \
        -Duser.home="$home" \
        -Drmq.logback.configurationFile="$logback" \
        -cp "$(_rmq_libdir)/*" \
        "$cls" -c "$state/$name.conf" \
        </dev/null >"$state/$name.out" 2>&1 &
    echo $! >"$state/$name.pid"
}

_rmq_tail_logs() {
    local state f
    state="$(_rmq_state)"
    for f in "$state"/rmqready*.log "$state/namesrv.out" "$state"/broker*.out \
        "$state/home/logs/rocketmqlogs/namesrv.log" "$state/home/logs/rocketmqlogs/broker.log" \
        "$state/home-b/logs/rocketmqlogs/broker.log"; do
        [[ -s "$f" ]] || continue
        echo "----- last lines of $f" >&2
        tail -n 25 "$f" >&2
    done
}

# _rmq_ready_one STATE SECONDS NAME: a real send to broker NAME within SECONDS (on a topic
# that only it holds, oe_ready for the first broker, oe_ready_broker-b for the second);
# attempts go to rmqready[-NAME].log.
_rmq_ready_one() {
    local state="$1" timeout="$2" b="$3" topic=oe_ready logf="$state/rmqready.log"
    if [[ $b == broker-b ]]; then
        topic=oe_ready_broker-b
        logf="$state/rmqready-broker-b.log"
    fi
    "$state/rmqready" -v -namesrv "127.0.0.1:$RMQ_NAMESRV_PORT" -broker "127.0.0.1:$(_rmq_broker_port "$b")" \
        -topic "$topic" -timeout "${timeout}s" 2>"$logf"
}

# _rmq_ready STATE SECONDS: every broker takes a real send within SECONDS.
_rmq_ready() {
    local state="$1" timeout="$2" b
    for b in $(_rmq_brokers); do
        _rmq_ready_one "$state" "$timeout" "$b" || return 1
    done
}

# _rmq_wait_port PORT SECONDS PID: until 127.0.0.1:PORT accepts a connection and PID is
# the one listening there (not a JVM of an earlier start), giving up early when PID has
# exited. PID is the JVM this shell just started: its liveness is checked by pid alone, as
# its command line is still the launcher's while it is being exec'd.
_rmq_wait_port() {
    local port="$1" secs="$2" pid="$3" i
    for ((i = 0; i < secs * 10; i++)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && _rmq_listens "$pid" "$port"; then
            return 0
        fi
        _rmq_running "$pid" || return 1
        sleep 0.1
    done
    return 1
}

# _rmq_listens PID PORT: PID holds the listener on PORT (assumed without ss).
_rmq_listens() {
    command -v ss >/dev/null || return 0
    [[ " $(_rmq_listeners "$2" | tr '\n' ' ') " == *" $1 "* ]]
}

# _rmq_launch NAME: start NAME's JVM (namesrv, broker or broker-b) in the background.
_rmq_launch() {
    if [[ $1 == namesrv ]]; then
        _rmq_java namesrv "$(_rmq_state)/home" org.apache.rocketmq.namesrv.NamesrvStartup rmq.namesrv.logback.xml \
            -Xms128m -Xmx256m -Xmn64m
    else
        _rmq_java_broker "$1"
    fi
}

# _rmq_spawn NAME: start NAME's JVM once its ports are free (a JVM stopped a moment ago may
# still hold one).
_rmq_spawn() {
    _rmq_ports_free "$1" 30 || return 1
    _rmq_launch "$1"
}

# _rmq_up NAME SECONDS: start NAME's JVM, then _rmq_await it.
_rmq_up() { _rmq_spawn "$1" && _rmq_await "$1" "$2"; }

# _rmq_await NAME SECONDS: wait up to SECONDS until the JVM just started for NAME listens on
# its first port. A JVM that exits first gets its exit status and output printed; one that
# could not bind a port (still held by the JVM before it) is started again, twice at most.
_rmq_await() {
    local name="$1" secs="$2" port pid try
    port="$(_rmq_ports "$name" | cut -d' ' -f1)"
    for ((try = 0; ; try++)); do
        pid="$(cat "$(_rmq_state)/$name.pid")"
        _rmq_wait_port "$port" "$secs" "$pid" && return 0
        if _rmq_running "$pid"; then
            _rmq_log "$name (pid $pid) is not listening on 127.0.0.1:$port after ${secs}s"
            _rmq_output "$name"
            return 1
        fi
        _rmq_exited "$name" "$pid" "$port"
        ((try < 2)) && _rmq_bind_failed "$name" || return 1
        _rmq_log "$name could not bind its port: starting it again ($((try + 1))/2) once its ports are free"
        _rmq_spawn "$name" || return 1
    done
}

# _rmq_exited NAME PID PORT: say that NAME's JVM exited before listening, with its exit
# status (known when this shell started it), its output and who holds its ports.
_rmq_exited() {
    local name="$1" pid="$2" port="$3" st=0
    wait "$pid" 2>/dev/null || st=$?
    if ((st == 127)); then st="unknown (not a child of this shell)"; fi
    _rmq_log "$name (pid $pid) exited with status $st before listening on 127.0.0.1:$port"
    _rmq_output "$name"
    [[ -z "$(_rmq_holders "$name")" ]] || _rmq_log "$name's ports are held by: $(_rmq_holders "$name" | tr -s ' \n' ' ')"
}

# _rmq_output NAME: the last lines NAME's JVM wrote to stdout (where startup errors go) and
# to its log.
_rmq_output() {
    local name="$1" f log=broker.log
    [[ $name == namesrv ]] && log=namesrv.log
    for f in "$(_rmq_state)/$name.out" "$(_rmq_home "$name")/logs/rocketmqlogs/$log"; do
        if [[ -s "$f" ]]; then
            # A Java stack trace says what failed at its top, which a tail cuts off.
            [[ $f != *.out ]] || grep -E '^(Caused by: )?[a-zA-Z.$]*(Exception|Error)\b' "$f" | head -n 5 | sed 's/^/exception: /' >&2 || true
            echo "----- last lines of $f" >&2
            tail -n 20 "$f" >&2
        else
            echo "----- $f: empty or missing" >&2
        fi
    done
}

# _rmq_bind_failed NAME: NAME's JVM printed a bind failure (a port still held).
_rmq_bind_failed() {
    grep -q -e 'Address already in use' -e 'Failed to bind' "$(_rmq_state)/$1.out" 2>/dev/null
}

rmq_start() {
    local state ns_pid br_pid t0
    state="$(_rmq_state)"
    t0=$SECONDS
    mkdir -p "$state" || return 1
    _rmq_build_jars || return 1
    _rmq_build_ready "$state" || return 1

    local b all=1
    ns_pid="$(_rmq_pid namesrv)" || all=0
    for b in $(_rmq_brokers); do
        _rmq_pid "$b" >/dev/null || all=0
    done
    if ((all)) && _rmq_ready "$state" 20; then
        _rmq_log "reusing running name server (pid $ns_pid) and brokers ($(for b in $(_rmq_brokers); do printf '%s pid %s ' "$b" "$(_rmq_pid "$b")"; done))"
        export OE_ROCKETMQ_NAMESRV="127.0.0.1:$RMQ_NAMESRV_PORT"
        return 0
    fi
    # Anything half-alive or not answering: stop it and start afresh
    # (RMQ_KEEP_STORE=1 keeps the store: a restart with messages in flight).
    rmq_stop || { _rmq_log "not starting: a JVM of the last start, or a port of ours, is still there"; return 1; }
    [[ ${RMQ_KEEP_STORE:-0} == 1 ]] || rm -rf "${state:?}/home" "${state:?}/home-b"
    mkdir -p "$state/home"
    _rmq_write_confs "$state"

    # The broker registers with the name server once at boot, then every 10 s only
    # (it registers with the name servers it has already connected to), so give it
    # a listening name server from the start.
    _rmq_up namesrv 60 || { _rmq_log "the name server did not start on 127.0.0.1:$RMQ_NAMESRV_PORT"; return 1; }
    for b in $(_rmq_brokers); do
        _rmq_spawn "$b" || return 1
    done
    for b in $(_rmq_brokers); do
        _rmq_await "$b" "$RMQ_READY_TIMEOUT" || { _rmq_log "$b did not start"; return 1; }
    done

    if ! _rmq_ready "$state" "$RMQ_READY_TIMEOUT"; then
        _rmq_log "not ready within ${RMQ_READY_TIMEOUT}s: $(tail -q -n 1 "$state"/rmqready*.log)"
        [[ -n "$(_rmq_pid namesrv)" ]] || _rmq_log "the name server JVM has exited"
        for b in $(_rmq_brokers); do
            [[ -n "$(_rmq_pid "$b")" ]] || _rmq_log "the $b JVM has exited"
        done
        _rmq_tail_logs
        return 1
    fi
    _rmq_log "ready after $((SECONDS - t0))s: name server 127.0.0.1:$RMQ_NAMESRV_PORT (pid $(_rmq_pid namesrv)), $(for b in $(_rmq_brokers); do printf '%s 127.0.0.1:%s (pid %s) ' "$(_rmq_broker_name "$b")" "$(_rmq_broker_port "$b")" "$(_rmq_pid "$b")"; done); state in $state"
    export OE_ROCKETMQ_NAMESRV="127.0.0.1:$RMQ_NAMESRV_PORT"
}

# _rmq_java_broker NAME: start broker NAME's JVM (heap 1 GiB at most, direct memory 512 MiB).
_rmq_java_broker() {
    local b="$1"
    mkdir -p "$(_rmq_home "$b")"
    _rmq_java "$b" "$(_rmq_home "$b")" org.apache.rocketmq.broker.BrokerStartup rmq.broker.logback.xml \
        -Xms256m -Xmx1g -XX:MaxDirectMemorySize=512m
}

# rmq_start_broker NAME: start broker NAME (broker or broker-b) again on the store it has (a
# restart after it was killed), unless it is running; wait until a send to it succeeds.
rmq_start_broker() {
    local b="$1" state
    state="$(_rmq_state)"
    case "$b" in
        broker) ;;
        broker-b) [[ -n "$RMQ_BROKER_B_PORT" ]] || { _rmq_log "broker-b is not enabled (RMQ_BROKER_B_PORT)"; return 1; } ;;
        *) _rmq_log "no broker $b"; return 1 ;;
    esac
    [[ -n "$(_rmq_pid namesrv)" ]] || { _rmq_log "the name server is not running (start everything: rmq_start)"; return 1; }
    if [[ -z "$(_rmq_pid "$b")" ]]; then
        [[ -s "$state/$b.conf" ]] || _rmq_write_broker_conf "$state" "$b"
        _rmq_up "$b" "$RMQ_READY_TIMEOUT" || return 1
    fi
    _rmq_ready_one "$state" "$RMQ_READY_TIMEOUT" "$b" || {
        _rmq_log "$b not ready within ${RMQ_READY_TIMEOUT}s"
        _rmq_tail_logs
        return 1
    }
    _rmq_log "$b ready on 127.0.0.1:$(_rmq_broker_port "$b") (pid $(_rmq_pid "$b"))"
}

# _rmq_running PID: the process has not finished exiting. A zombie is done (when this shell
# started the JVM, it stays one until the shell reaps it), unless it is only its main thread:
# while the JVM's other threads are still exiting they hold its files and sockets.
_rmq_running() {
    local st tasks
    st="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
    [[ -n "$st" ]] || return 1
    [[ "$st" == Z || "$st" == X ]] || return 0
    tasks=(/proc/"$1"/task/*)
    ((${#tasks[@]} > 1))
}

# _rmq_gone PID SECONDS: until PID has exited, SECONDS at most.
_rmq_gone() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        _rmq_running "$1" || return 0
        sleep 0.1
    done
    ! _rmq_running "$1"
}

# _rmq_term NAME PID: TERM, wait RMQ_STOP_TIMEOUT seconds (the broker's shutdown hook takes
# 12-20 s, the name server's ~3 s), then KILL and wait 10 s more; fail if it is still there.
_rmq_term() {
    local name="$1" pid="$2"
    kill -TERM "$pid" 2>/dev/null
    _rmq_gone "$pid" "$RMQ_STOP_TIMEOUT" && return 0
    _rmq_log "$name (pid $pid) still alive ${RMQ_STOP_TIMEOUT}s after TERM, sending KILL"
    kill -KILL "$pid" 2>/dev/null
    _rmq_gone "$pid" 10 && return 0
    _rmq_log "$name (pid $pid) still alive 10s after KILL (state $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null))"
    return 1
}

# _rmq_kill NAME: stop NAME's JVM, and any JVM of NAME's conf still listening on its ports
# (one whose pidfile was lost), then wait until its ports are free.
_rmq_kill() {
    local name="$1" state pid p pids rc=0
    state="$(_rmq_state)"
    pids="$(_rmq_pid "$name")" || true
    for p in $(_rmq_ports "$name"); do
        for pid in $(_rmq_listeners "$p"); do
            [[ " $pids " == *" $pid "* ]] || ! _rmq_is_ours "$name" "$pid" || pids="$pids $pid"
        done
    done
    for pid in $pids; do
        _rmq_term "$name" "$pid" || rc=1
    done
    rm -f "$state/$name.pid"
    _rmq_ports_free "$name" 10 || rc=1
    return "$rc"
}

rmq_stop() {
    local rc=0
    # Brokers first, so they do not spend their shutdown retrying the name server.
    _rmq_kill broker || rc=1
    _rmq_kill broker-b || rc=1 # also when it is not enabled now but was started before
    _rmq_kill namesrv || rc=1
    return "$rc"
}

_rmq_status() {
    local ns b p ok=0
    ns="$(_rmq_pid namesrv)" || ok=1
    printf 'namesrv: %s' "${ns:-stopped}"
    for b in $(_rmq_brokers); do
        p="$(_rmq_pid "$b")" || ok=1
        printf '  %s: %s' "$b" "${p:-stopped}"
    done
    echo "  state: $(_rmq_state)"
    return "$ok"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -u
    case "${1:-}" in
        start) rmq_start ;;
        stop) rmq_stop ;;
        status) _rmq_status ;;
        start-broker) rmq_start_broker "${2:?start-broker NAME}" ;;
        pid) _rmq_pid "${2:?pid NAME}" ;;
        *)
            echo "usage: bash $0 start|stop|status|start-broker NAME|pid NAME" >&2
            exit 2
            ;;
    esac
fi
