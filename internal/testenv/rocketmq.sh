# shellcheck shell=bash
# RocketMQ 5.3.3 (name server + one broker) on loopback for the integration tests.
#
# Sourced by internal/testenv/services.sh, it defines:
#   rmq_start  build the jar folder if needed, start both JVMs (or reuse them when
#              alive and answering), wait until a real send succeeds, and export
#              OE_ROCKETMQ_NAMESRV=127.0.0.1:19876
#   rmq_stop   stop both JVMs by pid (TERM, wait, then KILL)
# Executed, it runs one of them:  bash internal/testenv/rocketmq.sh start|stop|status
#
# State (configs, pidfiles, logs, store) lives in ${OE_STATE_DIR:-/tmp/orderexpiry-services}/rocketmq.
# A fresh start wipes the previous store there, so no old delayed message turns up in a new run
# (RMQ_KEEP_STORE=1 keeps it, for restart tests).
# Ports: name server 19876; broker 20911 (plus 20909 and 20912, which the broker derives from it;
# 20912, the HA port, listens on all interfaces: the broker has no setting for its address).
# Needs java 17, mvn and go on PATH.

_RMQ_SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_RMQ_REPO_ROOT="$(cd "$_RMQ_SRC_DIR/../.." && pwd)"

RMQ_NAMESRV_PORT="${RMQ_NAMESRV_PORT:-19876}"
RMQ_BROKER_PORT="${RMQ_BROKER_PORT:-20911}"
RMQ_READY_TIMEOUT="${RMQ_READY_TIMEOUT:-120}"
RMQ_DELAY_LEVELS="${RMQ_DELAY_LEVELS:-1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h}" # the broker's messageDelayLevel
RMQ_TIMER_WHEEL="${RMQ_TIMER_WHEEL:-true}" # the broker's timerWheelEnable (false: it refuses timer messages)

_rmq_state() { echo "${OE_STATE_DIR:-/tmp/orderexpiry-services}/rocketmq"; }
_rmq_libdir() { echo "$_RMQ_SRC_DIR/rocketmq/target/lib"; }
_rmq_log() { echo "rocketmq: $*" >&2; }

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
        broker) cls=org.apache.rocketmq.broker.BrokerStartup ;;
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
    cat >"$state/broker.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
namesrvAddr=127.0.0.1:$RMQ_NAMESRV_PORT
listenPort=$RMQ_BROKER_PORT
brokerIP1=127.0.0.1
bindAddress=127.0.0.1
storePathRootDir=$state/home/store
storePathCommitLog=$state/home/store/commitlog
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

# _rmq_java NAME CLASS LOGBACK HEAP...: start one JVM in the background.
_rmq_java() {
    local name="$1" cls="$2" logback="$3" state
    shift 3
    state="$(_rmq_state)"
    nohup java -server "$@" \
        -XX:+UseG1GC -XX:-OmitStackTraceInFastThrow \
        --add-opens java.base/java.lang=ALL-UNNAMED \
        --add-opens java.base/java.nio=ALL-UNNAMED \
        --add-opens java.base/sun.nio.ch=ALL-UNNAMED \
        --add-exports java.base/sun.nio.ch=ALL-UNNAMED \
        -Drocketmq.home.dir="$state/home" \
        -Duser.home="$state/home" \
        -Drmq.logback.configurationFile="$logback" \
        -cp "$(_rmq_libdir)/*" \
        "$cls" -c "$state/$name.conf" \
        </dev/null >"$state/$name.out" 2>&1 &
    echo $! >"$state/$name.pid"
}

_rmq_tail_logs() {
    local state f
    state="$(_rmq_state)"
    for f in "$state/rmqready.log" "$state/namesrv.out" "$state/broker.out" \
        "$state/home/logs/rocketmqlogs/namesrv.log" "$state/home/logs/rocketmqlogs/broker.log"; do
        [[ -s "$f" ]] || continue
        echo "----- last lines of $f" >&2
        tail -n 25 "$f" >&2
    done
}

# _rmq_ready STATE SECONDS: a real send within SECONDS; attempts go to rmqready.log.
_rmq_ready() {
    local state="$1" timeout="$2"
    "$state/rmqready" -v -namesrv "127.0.0.1:$RMQ_NAMESRV_PORT" -broker "127.0.0.1:$RMQ_BROKER_PORT" \
        -timeout "${timeout}s" 2>"$state/rmqready.log"
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

    ns_pid="$(_rmq_pid namesrv)" || true
    br_pid="$(_rmq_pid broker)" || true
    if [[ -n "$ns_pid" && -n "$br_pid" ]] && _rmq_ready "$state" 20; then
        _rmq_log "reusing running name server (pid $ns_pid) and broker (pid $br_pid)"
        export OE_ROCKETMQ_NAMESRV="127.0.0.1:$RMQ_NAMESRV_PORT"
        return 0
    fi
    # Anything half-alive or not answering: stop it and start afresh
    # (RMQ_KEEP_STORE=1 keeps the store: a restart with messages in flight).
    rmq_stop
    [[ ${RMQ_KEEP_STORE:-0} == 1 ]] || rm -rf "${state:?}/home"
    mkdir -p "$state/home"
    _rmq_write_confs "$state"

    _rmq_java namesrv org.apache.rocketmq.namesrv.NamesrvStartup rmq.namesrv.logback.xml \
        -Xms128m -Xmx256m -Xmn64m
    # The broker registers with the name server once at boot, then every 10 s only
    # (it registers with the name servers it has already connected to), so give it
    # a listening name server from the start.
    if ! _rmq_wait_port "$RMQ_NAMESRV_PORT" 60 namesrv; then
        _rmq_log "the name server is not listening on 127.0.0.1:$RMQ_NAMESRV_PORT after 60s"
        _rmq_tail_logs
        return 1
    fi
    _rmq_java broker org.apache.rocketmq.broker.BrokerStartup rmq.broker.logback.xml \
        -Xms256m -Xmx1g -XX:MaxDirectMemorySize=512m

    if ! _rmq_ready "$state" "$RMQ_READY_TIMEOUT"; then
        _rmq_log "not ready within ${RMQ_READY_TIMEOUT}s: $(tail -n 1 "$state/rmqready.log")"
        [[ -n "$(_rmq_pid namesrv)" ]] || _rmq_log "the name server JVM has exited"
        [[ -n "$(_rmq_pid broker)" ]] || _rmq_log "the broker JVM has exited"
        _rmq_tail_logs
        return 1
    fi
    _rmq_log "ready after $((SECONDS - t0))s: name server 127.0.0.1:$RMQ_NAMESRV_PORT (pid $(_rmq_pid namesrv)), broker 127.0.0.1:$RMQ_BROKER_PORT (pid $(_rmq_pid broker)); state in $state"
    export OE_ROCKETMQ_NAMESRV="127.0.0.1:$RMQ_NAMESRV_PORT"
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
    # Broker first, so it does not spend its shutdown retrying the name server.
    _rmq_kill broker
    _rmq_kill namesrv
}

_rmq_status() {
    local ns br
    ns="$(_rmq_pid namesrv)" || true
    br="$(_rmq_pid broker)" || true
    echo "namesrv: ${ns:-stopped}  broker: ${br:-stopped}  state: $(_rmq_state)"
    [[ -n "$ns" && -n "$br" ]]
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -u
    case "${1:-}" in
        start) rmq_start ;;
        stop) rmq_stop ;;
        status) _rmq_status ;;
        *)
            echo "usage: bash $0 start|stop|status" >&2
            exit 2
            ;;
    esac
fi
