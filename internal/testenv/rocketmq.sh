# shellcheck shell=bash
# RocketMQ 5.3.3 (name server + one broker, or two) on loopback for the integration tests.
#
# Sourced by internal/testenv/services.sh, it defines:
#   rmq_start  build the jar folder if needed, start the JVMs (or reuse them when
#              alive and answering), wait until a real send succeeds on every broker,
#              and export OE_ROCKETMQ_NAMESRV=127.0.0.1:19876
#   rmq_stop   stop every JVM by pid (TERM, wait, then KILL)
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
# Needs java 17, mvn and go on PATH.

_RMQ_SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_RMQ_REPO_ROOT="$(cd "$_RMQ_SRC_DIR/../.." && pwd)"

RMQ_NAMESRV_PORT="${RMQ_NAMESRV_PORT:-19876}"
RMQ_BROKER_PORT="${RMQ_BROKER_PORT:-20911}"
RMQ_BROKER_B_PORT="${RMQ_BROKER_B_PORT:-}" # empty: no second broker
RMQ_READY_TIMEOUT="${RMQ_READY_TIMEOUT:-120}"
RMQ_DELAY_LEVELS="${RMQ_DELAY_LEVELS:-1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h}" # the broker's messageDelayLevel
RMQ_TIMER_WHEEL="${RMQ_TIMER_WHEEL:-true}" # the broker's timerWheelEnable (false: it refuses timer messages)

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
    local name="$1" state pid cls cmd
    state="$(_rmq_state)"
    [[ -s "$state/$name.pid" ]] || return 1
    pid="$(cat "$state/$name.pid")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    case "$name" in
        namesrv) cls=org.apache.rocketmq.namesrv.NamesrvStartup ;;
        broker | broker-b) cls=org.apache.rocketmq.broker.BrokerStartup ;;
        *) return 1 ;;
    esac
    # Guard against a reused pid: the command line must name our class and conf.
    # (No pipe into grep -q here: under pipefail its early exit can fail the pipe.)
    cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    [[ "$cmd" == *"$cls -c $state/$name.conf"* ]] || return 1
    echo "$pid"
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

# _rmq_wait_port PORT SECONDS NAME: until 127.0.0.1:PORT accepts a connection,
# giving up early when NAME's JVM has exited.
_rmq_wait_port() {
    local port="$1" secs="$2" name="$3" i
    for ((i = 0; i < secs * 10; i++)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        [[ -n "$(_rmq_pid "$name")" ]] || return 1
        sleep 0.1
    done
    return 1
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
    rmq_stop
    [[ ${RMQ_KEEP_STORE:-0} == 1 ]] || rm -rf "${state:?}/home" "${state:?}/home-b"
    mkdir -p "$state/home"
    _rmq_write_confs "$state"

    _rmq_java namesrv "$state/home" org.apache.rocketmq.namesrv.NamesrvStartup rmq.namesrv.logback.xml \
        -Xms128m -Xmx256m -Xmn64m
    # The broker registers with the name server once at boot, then every 10 s only
    # (it registers with the name servers it has already connected to), so give it
    # a listening name server from the start.
    if ! _rmq_wait_port "$RMQ_NAMESRV_PORT" 60 namesrv; then
        _rmq_log "the name server is not listening on 127.0.0.1:$RMQ_NAMESRV_PORT after 60s"
        _rmq_tail_logs
        return 1
    fi
    for b in $(_rmq_brokers); do
        _rmq_java_broker "$b"
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
        _rmq_java_broker "$b"
    fi
    _rmq_ready_one "$state" "$RMQ_READY_TIMEOUT" "$b" || {
        _rmq_log "$b not ready within ${RMQ_READY_TIMEOUT}s"
        _rmq_tail_logs
        return 1
    }
    _rmq_log "$b ready on 127.0.0.1:$(_rmq_broker_port "$b") (pid $(_rmq_pid "$b"))"
}

# _rmq_running PID: the process exists and is not a zombie (when this shell
# started the JVM, it stays a zombie until the shell reaps it).
_rmq_running() {
    local st
    st="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
    [[ -n "$st" && "$st" != Z ]]
}

# _rmq_kill NAME: TERM, wait up to 30 s (the broker takes ~11 s, the name
# server ~6 s), then KILL.
_rmq_kill() {
    local name="$1" state pid i
    state="$(_rmq_state)"
    pid="$(_rmq_pid "$name")" || { rm -f "$state/$name.pid"; return 0; }
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < 300; i++)); do
        _rmq_running "$pid" || break
        sleep 0.1
    done
    if _rmq_running "$pid"; then
        _rmq_log "$name (pid $pid) still alive 30s after TERM, sending KILL"
        kill -KILL "$pid" 2>/dev/null
        for ((i = 0; i < 50; i++)); do
            _rmq_running "$pid" || break
            sleep 0.1
        done
    fi
    rm -f "$state/$name.pid"
}

rmq_stop() {
    # Brokers first, so they do not spend their shutdown retrying the name server.
    _rmq_kill broker
    _rmq_kill broker-b # also when it is not enabled now but was started before
    _rmq_kill namesrv
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
