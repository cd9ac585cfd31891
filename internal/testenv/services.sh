#!/usr/bin/env bash
# services.sh — the real servers the integration tests talk to, on loopback only.
#
#   bash internal/testenv/services.sh start    install what is missing, start (or reuse) them
#   bash internal/testenv/services.sh stop     stop what start started, by pid
#   bash internal/testenv/services.sh status   report each server (exit 0 when all answer)
#   bash internal/testenv/services.sh env      print the export lines the tests read
#   bash internal/testenv/services.sh clean    stop, then delete the state directory
#   bash internal/testenv/services.sh pid NAME        print the pid of one server (exit 1: not running)
#   bash internal/testenv/services.sh start-one NAME  start one server again on the data it has
#     NAME: redis-primary, redis-replica, redis-pair (both, and the replica following the
#     primary again after a promotion), redis-cluster-PORT (one node of the Redis Cluster, on
#     its nodes.conf), broker-a, broker-b, galera-N (node N of the Galera cluster, 1-3, rejoining
#     it by IST or SST). The fault tests (internal/soak) SIGKILL a server by
#     its pid and bring it back with start-one.
#
# Each server has its own data directory under ${OE_STATE_DIR:-/tmp/orderexpiry-services} and
# its own port, so it never clashes with a system server:
#   Redis       127.0.0.1:16379   no persistence
#   Redis Cluster 127.0.0.1:17001-17003 (bus ports +10000), three masters, no persistence
#   MariaDB     127.0.0.1:13306   user oe/oe (ALL PRIVILEGES ON *.*), database oe
#   PostgreSQL  127.0.0.1:15432   role oe/oe (SUPERUSER), database oe owned by oe
#   Redis primary 127.0.0.1:16380 and its replica 127.0.0.1:16381 (REPLICAOF the primary),
#               AOF (appendfsync everysec), maxmemory-policy noeviction: what cancel/redisseat asks
#   Redis Cluster replicas 127.0.0.1:17004-17006, one per master (the failover case)
#   RocketMQ (rocketmq.sh) name server 19876, brokers broker-a 20911 and broker-b 20921
#   MariaDB Galera Cluster (galera.sh) 127.0.0.1:13316-13318, three nodes, user oe/oe, database oe
#               (group communication 14567-14569, IST 14577-14579, SST 14587-14589)
#   PostgreSQL under Patroni (patroni.sh) 127.0.0.1:15441-15443, three nodes streaming from the
#               leader, Patroni REST 18441-18443, etcd 12379-12380; role oe/oe, database oe
# Data directories survive stop, so a second start is quick; tests create their own databases.
#
# If internal/testenv/rocketmq.sh exists it is sourced: start ends with rmq_start, stop begins
# with rmq_stop, and env prints the OE_ROCKETMQ_NAMESRV that rmq_start exported.
# OE_SKIP_ROCKETMQ=1 leaves RocketMQ alone (then its tests skip, or fail when servers are required).
# Likewise internal/testenv/galera.sh: start ends with gal_start, stop begins with gal_stop, status
# reports its nodes and env prints OE_GALERA_DSNS and OE_GALERA_SH; OE_SKIP_GALERA=1 leaves it alone.
# Likewise internal/testenv/patroni.sh: start ends with pat_start, stop begins with pat_stop,
# status reports its nodes and env prints OE_PATRONI_DSN, OE_PATRONI_REST and OE_PATRONI_SH;
# OE_SKIP_PATRONI=1 leaves it alone.
#
# Progress goes to stderr; only `env` writes to stdout.
set -euo pipefail

STATE_DIR="${OE_STATE_DIR:-/tmp/orderexpiry-services}"
REDIS_PORT="${OE_REDIS_PORT:-16379}" # the port overrides exist to run a second, separate set
MYSQL_PORT="${OE_MYSQL_PORT:-13306}"
PG_PORT="${OE_PG_PORT:-15432}"
READY_TIMEOUT="${OE_READY_TIMEOUT:-60}" # seconds each server gets to answer
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RMQ_SCRIPT="$HERE/rocketmq.sh"
GAL_SCRIPT="$HERE/galera.sh"
PAT_SCRIPT="$HERE/patroni.sh"

REDIS_CLUSTER_PORTS=(${OE_REDIS_CLUSTER_PORTS:-17001 17002 17003})
REDIS_CLUSTER_REPLICA_PORTS=(${OE_REDIS_CLUSTER_REPLICA_PORTS:-17004 17005 17006}) # one per master, in order
REDIS_PRIMARY_PORT="${OE_REDIS_PRIMARY_PORT:-16380}"
REDIS_REPLICA_PORT="${OE_REDIS_REPLICA_PORT:-16381}"
export RMQ_BROKER_B_PORT="${RMQ_BROKER_B_PORT:-20921}" # rocketmq.sh's second broker
RC_DIR="$STATE_DIR/redis-cluster"

REDIS_DIR="$STATE_DIR/redis"
REDIS_PIDFILE="$REDIS_DIR/redis.pid"
REDIS_LOG="$REDIS_DIR/redis.log"

MYSQL_DIR="$STATE_DIR/mariadb"
MYSQL_DATA="$MYSQL_DIR/data"
MYSQL_SOCK="$MYSQL_DIR/mysqld.sock"
MYSQL_PIDFILE="$MYSQL_DIR/mariadbd.pid"
MYSQL_LOG="$MYSQL_DIR/mariadbd.log"

PG_DIR="$STATE_DIR/postgres" # also the unix-socket directory
PG_DATA="$PG_DIR/data"
PG_PIDFILE="$PG_DATA/postmaster.pid"
PG_LOG="$PG_DIR/postgres.log"

log() { printf '[services] %s\n' "$*" >&2; }
die() {
	printf '[services] ERROR: %s\n' "$*" >&2
	exit 1
}

is_root() { [[ $EUID -eq 0 ]]; }

# ---------------------------------------------------------------------------------------------
# Binaries and installation

REDIS_SERVER="" REDIS_CLI="" MARIADBD="" MYSQL_INSTALL_DB="" MYSQL_CLIENT="" PG_BIN=""

find_bins() {
	REDIS_SERVER="$(command -v redis-server || true)"
	REDIS_CLI="$(command -v redis-cli || true)"
	MARIADBD=""
	local c
	for c in /usr/sbin/mariadbd /usr/sbin/mysqld "$(command -v mariadbd || true)"; do
		if [[ -n $c && -x $c ]]; then
			MARIADBD="$c"
			break
		fi
	done
	MYSQL_INSTALL_DB="$(command -v mariadb-install-db || command -v mysql_install_db || true)"
	MYSQL_CLIENT="$(command -v mariadb || command -v mysql || true)"
	PG_BIN=""
	local d
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V); do
		[[ -x $d/initdb && -x $d/pg_ctl && -x $d/postgres && -x $d/psql && -x $d/pg_isready ]] && PG_BIN="$d"
	done
	return 0
}

missing_packages() {
	local pkgs=()
	[[ -n $REDIS_SERVER && -n $REDIS_CLI ]] || pkgs+=(redis-server)
	[[ -n $MARIADBD && -n $MYSQL_INSTALL_DB && -n $MYSQL_CLIENT ]] || pkgs+=(mariadb-server)
	[[ -n $PG_BIN ]] || pkgs+=(postgresql)
	echo "${pkgs[*]}"
}

install_missing() {
	find_bins
	local missing
	missing="$(missing_packages)"
	[[ -z $missing ]] && return 0
	is_root || die "missing packages: $missing (run this script as root, or install them)"
	command -v apt-get >/dev/null || die "missing packages: $missing, and there is no apt-get"
	log "installing: $missing"
	# The packages' maintainer scripts would start system-wide servers (on the default ports)
	# through invoke-rc.d; a policy-rc.d answering 101 forbids that while we install.
	local policy=/usr/sbin/policy-rc.d made_policy=0
	if [[ ! -e $policy ]]; then
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT # also when interrupted
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		made_policy=1
	fi
	mkdir -p "$STATE_DIR"
	local rc=0 t0=$SECONDS apt_log="$STATE_DIR/apt.log"
	{
		apt-get -o DPkg::Lock::Timeout=300 update -qq &&
			DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
				--no-install-recommends $missing
	} >"$apt_log" 2>&1 || rc=$?
	if ((made_policy)); then
		rm -f "$policy"
		trap - EXIT
	fi
	if ((rc != 0)); then
		tail -n 30 "$apt_log" >&2
		die "apt-get failed (exit $rc) installing: $missing (log: $apt_log)"
	fi
	log "installed $missing in $((SECONDS - t0))s (log: $apt_log)"
	find_bins
	missing="$(missing_packages)"
	[[ -z $missing ]] || die "still missing binaries after installing packages: $missing"
}

# ---------------------------------------------------------------------------------------------
# Helpers

# alive PID: the process exists and is not a zombie (an exited daemon stays a zombie until
# init reaps it, which some inits do only every few seconds).
alive() {
	local state
	state="$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)" || return 1
	[[ -n $state && $state != Z && $state != X ]]
}

# pid_of PIDFILE COMM: print the pid in PIDFILE if that process is alive and its name is COMM.
pid_of() {
	local pidfile="$1" comm="$2" pid
	[[ -s $pidfile ]] || return 1
	pid="$(head -n1 "$pidfile" 2>/dev/null | tr -dc '0-9')"
	[[ -n $pid ]] || return 1
	alive "$pid" || return 1
	[[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$comm" ]] || return 1
	echo "$pid"
}

port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

ensure_port_free() {
	local port="$1" what="$2"
	if port_open "$port"; then
		die "$what: port 127.0.0.1:$port is already in use by a process this script did not start (its pidfile under $STATE_DIR is missing or stale); stop it, or remove it: $(ss -ltnpH "sport = :$port" 2>/dev/null | head -1)"
	fi
}

# wait_ready SECONDS PIDFILE COMM CMD...: retry CMD until it succeeds; give up after SECONDS,
# or as soon as the server's pidfile names a dead process.
wait_ready() {
	local secs="$1" pidfile="$2" comm="$3"
	shift 3
	local deadline=$((SECONDS + secs))
	while ((SECONDS < deadline)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		if [[ -s $pidfile ]] && ! pid_of "$pidfile" "$comm" >/dev/null; then
			"$@" >/dev/null 2>&1 && return 0
			return 1
		fi
		sleep 0.2
	done
	"$@" >/dev/null 2>&1
}

fail_with_log() {
	local what="$1" logfile="$2"
	{
		echo "----- last lines of $logfile -----"
		tail -n 40 "$logfile" 2>/dev/null || echo "(no log)"
		echo "-----"
	} >&2
	die "$what did not start or does not answer (log: $logfile)"
}

# stop_pid PID NAME SIGNAL SECONDS: send SIGNAL, wait up to SECONDS, then SIGKILL and wait.
stop_pid() {
	local pid="$1" name="$2" sig="$3" secs="$4" i
	kill "-$sig" "$pid" 2>/dev/null || return 0
	kill -CONT "$pid" 2>/dev/null || true # in case it was stopped (SIGSTOP, Ctrl-Z)
	for ((i = 0; i < secs * 10; i++)); do
		alive "$pid" || return 0
		sleep 0.1
	done
	log "$name (pid $pid) still running after ${secs}s; sending SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		alive "$pid" || return 0
		sleep 0.1
	done
	die "$name (pid $pid) did not exit"
}

# ---------------------------------------------------------------------------------------------
# Redis

# Every client call is bounded by `timeout`: a server that accepts connections but never answers
# (stopped, wedged) must not hang this script. TMO overrides the bound for one call.
redis_ping() { [[ "$(timeout 3 "$REDIS_CLI" -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]; }

redis_start() {
	mkdir -p "$REDIS_DIR"
	local pid
	if pid="$(pid_of "$REDIS_PIDFILE" redis-server)"; then
		if wait_ready 10 "$REDIS_PIDFILE" redis-server redis_ping; then
			log "redis: reusing pid $pid on 127.0.0.1:$REDIS_PORT"
			return 0
		fi
		log "redis: pid $pid does not answer; restarting it"
		stop_pid "$pid" redis TERM 10
	fi
	rm -f "$REDIS_PIDFILE"
	ensure_port_free "$REDIS_PORT" redis
	"$REDIS_SERVER" --daemonize yes --pidfile "$REDIS_PIDFILE" --logfile "$REDIS_LOG" \
		--dir "$REDIS_DIR" --bind 127.0.0.1 --port "$REDIS_PORT" --protected-mode yes \
		--save "" --appendonly no >>"$REDIS_LOG" 2>&1 9>&- || fail_with_log redis "$REDIS_LOG"
	wait_ready "$READY_TIMEOUT" "$REDIS_PIDFILE" redis-server redis_ping || fail_with_log redis "$REDIS_LOG"
	log "redis: started pid $(pid_of "$REDIS_PIDFILE" redis-server || echo '?') on 127.0.0.1:$REDIS_PORT"
}

redis_stop() {
	local pid
	if pid="$(pid_of "$REDIS_PIDFILE" redis-server)"; then
		stop_pid "$pid" redis TERM 20
		log "redis: stopped pid $pid"
	fi
	rm -f "$REDIS_PIDFILE"
}

# ---------------------------------------------------------------------------------------------
# Redis primary + replica: the replicated Redis the library's users run. Both persist (AOF,
# everysec) and never evict, as cancel/redisseat requires; the replica follows the primary by
# asynchronous replication, so a promotion after the primary dies loses its last writes.

rp_dir() { echo "$STATE_DIR/redis-$1"; } # primary | replica
rp_port() { if [[ $1 == primary ]]; then echo "$REDIS_PRIMARY_PORT"; else echo "$REDIS_REPLICA_PORT"; fi; }
rp_cli() { timeout "${TMO:-3}" "$REDIS_CLI" -h 127.0.0.1 -p "$(rp_port "$1")" "${@:2}" 2>/dev/null | tr -d '\r'; }
rp_ping() { [[ "$(rp_cli "$1" ping)" == PONG ]]; }
# rp_following: the replica's link to the primary is up (it has loaded the primary's data).
rp_following() {
	local info
	info="$(rp_cli replica info replication)" || return 1
	[[ $info == *role:slave* && $info == *master_port:$REDIS_PRIMARY_PORT* && $info == *master_link_status:up* ]]
}
rp_is_master() { [[ "$(rp_cli "$1" info replication)" == *role:master* ]]; }

# rp_start_one primary|replica: start that server on the data it has (its AOF), unless it runs.
rp_start_one() {
	local which="$1" dir port pid
	dir="$(rp_dir "$which")" port="$(rp_port "$which")"
	mkdir -p "$dir"
	if pid="$(pid_of "$dir/redis.pid" redis-server)"; then
		wait_ready 10 "$dir/redis.pid" redis-server rp_ping "$which" && return 0
		log "redis $which: pid $pid does not answer; restarting it"
		stop_pid "$pid" "redis $which" TERM 10
	fi
	rm -f "$dir/redis.pid"
	ensure_port_free "$port" "redis $which"
	local follow=()
	[[ $which == replica ]] && follow=(--replicaof 127.0.0.1 "$REDIS_PRIMARY_PORT")
	"$REDIS_SERVER" --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
		--dir "$dir" --bind 127.0.0.1 --port "$port" --protected-mode yes \
		--save "" --appendonly yes --appendfsync everysec --maxmemory-policy noeviction \
		"${follow[@]}" >>"$dir/redis.log" 2>&1 9>&- || fail_with_log "redis $which" "$dir/redis.log"
	wait_ready "$READY_TIMEOUT" "$dir/redis.pid" redis-server rp_ping "$which" || fail_with_log "redis $which" "$dir/redis.log"
	log "redis $which: started pid $(pid_of "$dir/redis.pid" redis-server || echo '?') on 127.0.0.1:$port"
}

# redis_pair_start: both running, the primary a master, the replica following it. After a
# fault test promoted the replica, this makes it follow the primary again (a full resync:
# the primary's data wins).
redis_pair_start() {
	rp_start_one primary
	rp_is_master primary || rp_cli primary replicaof no one >/dev/null
	rp_start_one replica
	if ! rp_following; then
		rp_cli replica replicaof 127.0.0.1 "$REDIS_PRIMARY_PORT" >/dev/null
	fi
	local deadline=$((SECONDS + READY_TIMEOUT))
	until rp_following; do
		((SECONDS < deadline)) || fail_with_log "redis replica (link to the primary not up)" "$(rp_dir replica)/redis.log"
		sleep 0.2
	done
	log "redis pair: primary 127.0.0.1:$REDIS_PRIMARY_PORT, replica 127.0.0.1:$REDIS_REPLICA_PORT following it"
}

redis_pair_stop() {
	local which dir pid
	for which in replica primary; do
		dir="$(rp_dir "$which")"
		if pid="$(pid_of "$dir/redis.pid" redis-server)"; then
			stop_pid "$pid" "redis $which" TERM 20
		fi
		rm -f "$dir/redis.pid"
	done
}

rp_ok() { rp_ping primary && rp_is_master primary && rp_following; }

# ---------------------------------------------------------------------------------------------
# Redis Cluster: three masters holding all 16384 slots, so the seat store's scripts are proven
# where keys of different shows live on different nodes.

rc_nodes() {
	local p out=()
	for p in "${REDIS_CLUSTER_PORTS[@]}"; do out+=("127.0.0.1:$p"); done
	echo "${out[*]}"
}
rc_replica_nodes() {
	local p out=()
	for p in "${REDIS_CLUSTER_REPLICA_PORTS[@]}"; do out+=("127.0.0.1:$p"); done
	echo "${out[*]}"
}
RC_ALL_PORTS=("${REDIS_CLUSTER_PORTS[@]}" "${REDIS_CLUSTER_REPLICA_PORTS[@]}")

# rc_ok: every node answers and sees the cluster as ok with every slot assigned, the first
# ports are masters and each replica port follows one with its link up.
rc_ok() {
	local p info
	for p in "${RC_ALL_PORTS[@]}"; do
		info="$(timeout 3 "$REDIS_CLI" -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | tr -d '\r')" || return 1
		[[ $info == *cluster_state:ok* && $info == *cluster_slots_assigned:16384* ]] || return 1
	done
	for p in "${REDIS_CLUSTER_PORTS[@]}"; do
		[[ "$(timeout 3 "$REDIS_CLI" -h 127.0.0.1 -p "$p" info replication 2>/dev/null | tr -d '\r')" == *role:master* ]] || return 1
	done
	for p in "${REDIS_CLUSTER_REPLICA_PORTS[@]}"; do
		info="$(timeout 3 "$REDIS_CLI" -h 127.0.0.1 -p "$p" info replication 2>/dev/null | tr -d '\r')" || return 1
		[[ $info == *role:slave* && $info == *master_link_status:up* ]] || return 1
	done
}

rc_ping_one() { [[ "$(timeout 3 "$REDIS_CLI" -h 127.0.0.1 -p "$1" ping 2>/dev/null)" == PONG ]]; }

# rc_launch PORT: start the cluster node of PORT on what its directory holds (its nodes.conf:
# the node id and the cluster it knows; no data, the nodes do not persist).
rc_launch() {
	local p="$1"
	mkdir -p "$RC_DIR/$p"
	"$REDIS_SERVER" --daemonize yes --pidfile "$RC_DIR/$p/redis.pid" --logfile "$RC_DIR/$p/redis.log" \
		--dir "$RC_DIR/$p" --bind 127.0.0.1 --port "$p" --protected-mode yes \
		--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
		--save "" --appendonly no >>"$RC_DIR/$p/redis.log" 2>&1 9>&- || fail_with_log "redis cluster $p" "$RC_DIR/$p/redis.log"
}

# rc_port NAME: the port of a cluster node named redis-cluster-PORT, if PORT is one of the cluster's.
rc_port() {
	local p="${1#redis-cluster-}" q
	for q in "${RC_ALL_PORTS[@]}"; do
		[[ $p == "$q" ]] && echo "$p" && return 0
	done
	die "no redis cluster node '$1' (redis-cluster-PORT, PORT one of ${RC_ALL_PORTS[*]})"
}

# rc_start_node PORT: start that node again after a fault test killed it, unless it runs. Its
# nodes.conf makes it rejoin the cluster it knew: a master whose slots a replica took over while
# it was down comes back as that node's replica (and loads its data from it).
rc_start_node() {
	local p="$1" pid
	if pid="$(pid_of "$RC_DIR/$p/redis.pid" redis-server)"; then
		wait_ready 10 "$RC_DIR/$p/redis.pid" redis-server rc_ping_one "$p" && return 0
		log "redis cluster $p: pid $pid does not answer; restarting it"
		stop_pid "$pid" "redis cluster $p" TERM 10
	fi
	[[ -s $RC_DIR/$p/nodes.conf ]] || die "redis cluster $p: no nodes.conf (start the whole set first)"
	rm -f "$RC_DIR/$p/redis.pid"
	ensure_port_free "$p" "redis cluster $p"
	rc_launch "$p"
	wait_ready "$READY_TIMEOUT" "$RC_DIR/$p/redis.pid" redis-server rc_ping_one "$p" || fail_with_log "redis cluster $p" "$RC_DIR/$p/redis.log"
	log "redis cluster $p: started pid $(pid_of "$RC_DIR/$p/redis.pid" redis-server || echo '?')"
}

redis_cluster_start() {
	local p all=1
	for p in "${RC_ALL_PORTS[@]}"; do
		pid_of "$RC_DIR/$p/redis.pid" redis-server >/dev/null || all=0
	done
	if ((all)) && rc_ok; then
		log "redis cluster: reusing $(rc_nodes)"
		return 0
	fi
	# Anything less than a healthy cluster is started afresh: a half-made one cannot be trusted.
	redis_cluster_stop
	rm -rf "$RC_DIR"
	for p in "${RC_ALL_PORTS[@]}"; do
		ensure_port_free "$p" "redis cluster"
		ensure_port_free "$((p + 10000))" "redis cluster bus"
		rc_launch "$p"
	done
	for p in "${RC_ALL_PORTS[@]}"; do
		wait_ready "$READY_TIMEOUT" "$RC_DIR/$p/redis.pid" redis-server rc_ping_one "$p" || fail_with_log "redis cluster $p" "$RC_DIR/$p/redis.log"
	done
	# shellcheck disable=SC2046 # one argument per node
	timeout 60 "$REDIS_CLI" --cluster create $(rc_nodes) --cluster-replicas 0 --cluster-yes >"$RC_DIR/create.log" 2>&1 ||
		fail_with_log "redis cluster create" "$RC_DIR/create.log"
	# Each replica is added to its own master, by the master's node id, so that the pairing is
	# the ports' order (redis-cli --cluster-replicas 1 would pair them by its own choice).
	local i mport rport mid
	for i in "${!REDIS_CLUSTER_REPLICA_PORTS[@]}"; do
		mport="${REDIS_CLUSTER_PORTS[i]}" rport="${REDIS_CLUSTER_REPLICA_PORTS[i]}"
		mid="$(timeout 3 "$REDIS_CLI" -h 127.0.0.1 -p "$mport" cluster myid 2>/dev/null | tr -d '\r')"
		[[ -n $mid ]] || fail_with_log "redis cluster (node id of $mport)" "$RC_DIR/$mport/redis.log"
		timeout 60 "$REDIS_CLI" --cluster add-node "127.0.0.1:$rport" "127.0.0.1:$mport" --cluster-slave \
			--cluster-master-id "$mid" >>"$RC_DIR/create.log" 2>&1 ||
			fail_with_log "redis cluster add-node $rport (replica of $mport)" "$RC_DIR/create.log"
	done
	local deadline=$((SECONDS + READY_TIMEOUT))
	until rc_ok; do
		((SECONDS < deadline)) || fail_with_log "redis cluster (state not ok)" "$RC_DIR/create.log"
		sleep 0.2
	done
	log "redis cluster: started masters $(rc_nodes), replicas $(rc_replica_nodes)"
}

redis_cluster_stop() {
	local p pid
	for p in "${RC_ALL_PORTS[@]}"; do
		if pid="$(pid_of "$RC_DIR/$p/redis.pid" redis-server)"; then
			stop_pid "$pid" "redis cluster $p" TERM 20
		fi
		rm -f "$RC_DIR/$p/redis.pid"
	done
}

# ---------------------------------------------------------------------------------------------
# MariaDB

mysql_root() {
	timeout "${TMO:-30}" "$MYSQL_CLIENT" --no-defaults --connect-timeout=3 --protocol=socket \
		--socket="$MYSQL_SOCK" -uroot "$@"
}
mysql_oe() {
	timeout "${TMO:-30}" "$MYSQL_CLIENT" --no-defaults --connect-timeout=3 --protocol=tcp \
		-h127.0.0.1 -P"$MYSQL_PORT" -uoe -poe "$@"
}
mysql_root_ping() { TMO=3 mysql_root -N -e 'SELECT 1'; }

mysql_setup() {
	mysql_root <<'SQL' || fail_with_log mariadb "$MYSQL_LOG"
CREATE USER IF NOT EXISTS 'oe'@'127.0.0.1' IDENTIFIED BY 'oe';
CREATE USER IF NOT EXISTS 'oe'@'localhost' IDENTIFIED BY 'oe';
ALTER USER 'oe'@'127.0.0.1' IDENTIFIED BY 'oe';
ALTER USER 'oe'@'localhost' IDENTIFIED BY 'oe';
GRANT ALL PRIVILEGES ON *.* TO 'oe'@'127.0.0.1' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON *.* TO 'oe'@'localhost' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS oe CHARACTER SET utf8mb4;
SQL
	mysql_oe -N -e 'SELECT 1' oe >/dev/null || fail_with_log "mariadb (TCP login as oe)" "$MYSQL_LOG"
}

mysql_start() {
	mkdir -p "$MYSQL_DIR"
	local pid
	if pid="$(pid_of "$MYSQL_PIDFILE" mariadbd)"; then
		if wait_ready 20 "$MYSQL_PIDFILE" mariadbd mysql_root_ping; then
			mysql_setup
			log "mariadb: reusing pid $pid on 127.0.0.1:$MYSQL_PORT"
			return 0
		fi
		log "mariadb: pid $pid does not answer; restarting it"
		stop_pid "$pid" mariadb TERM 60
	fi
	rm -f "$MYSQL_PIDFILE" "$MYSQL_SOCK" "$MYSQL_SOCK.lock"
	ensure_port_free "$MYSQL_PORT" mariadb

	# As root, mariadbd refuses to run unless told --user=root; running as root (rather than
	# chown to mysql) keeps any OE_STATE_DIR usable, even one the mysql user cannot reach.
	local user_opt=()
	is_root && user_opt=(--user=root)
	if [[ ! -d $MYSQL_DATA/mysql ]]; then
		log "mariadb: initialising $MYSQL_DATA"
		rm -rf "$MYSQL_DATA"
		mkdir -p "$MYSQL_DATA"
		"$MYSQL_INSTALL_DB" --no-defaults "${user_opt[@]}" --datadir="$MYSQL_DATA" \
			--auth-root-authentication-method=socket --skip-test-db \
			>"$MYSQL_DIR/install.log" 2>&1 || fail_with_log "mariadb-install-db" "$MYSQL_DIR/install.log"
	fi
	start-stop-daemon --start --quiet --background --make-pidfile --pidfile "$MYSQL_PIDFILE" \
		--exec "$MARIADBD" -- --no-defaults "${user_opt[@]}" \
		--datadir="$MYSQL_DATA" --socket="$MYSQL_SOCK" --pid-file="$MYSQL_DIR/mariadbd.server.pid" \
		--port="$MYSQL_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
		--log-error="$MYSQL_LOG" \
		--character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
		--max-connections=500 --innodb-buffer-pool-size=768M \
		--innodb-flush-log-at-trx-commit=2 --innodb-doublewrite=0 \
		--innodb-buffer-pool-dump-at-shutdown=0 --innodb-buffer-pool-load-at-startup=0 9>&- ||
		fail_with_log mariadb "$MYSQL_LOG"
	wait_ready "$READY_TIMEOUT" "$MYSQL_PIDFILE" mariadbd mysql_root_ping || fail_with_log mariadb "$MYSQL_LOG"
	mysql_setup
	log "mariadb: started pid $(pid_of "$MYSQL_PIDFILE" mariadbd || echo '?') on 127.0.0.1:$MYSQL_PORT"
}

mysql_stop() {
	local pid
	if pid="$(pid_of "$MYSQL_PIDFILE" mariadbd)"; then
		stop_pid "$pid" mariadb TERM 60
		log "mariadb: stopped pid $pid"
	fi
	rm -f "$MYSQL_PIDFILE"
}

# ---------------------------------------------------------------------------------------------
# PostgreSQL (initdb and the server refuse to run as root: as root they run as user postgres)

as_pg() {
	if is_root; then
		(cd "$PG_DIR" && timeout "${TMO:-300}" runuser -u postgres -- "$@")
	else
		(cd "$PG_DIR" && timeout "${TMO:-300}" "$@")
	fi
}
pg_super() { TMO="${TMO:-30}" as_pg "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_DIR" -p "$PG_PORT" -U postgres -d postgres "$@"; }
pg_oe() { PGPASSWORD=oe PGCONNECT_TIMEOUT=3 timeout "${TMO:-30}" "$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$PG_PORT" -U oe -d oe "$@"; }
pg_ready() {
	timeout 3 "$PG_BIN/pg_isready" -q -t 2 -h "$PG_DIR" -p "$PG_PORT" -U postgres -d postgres &&
		TMO=3 pg_super -tAc 'SELECT 1'
}

pg_setup() {
	pg_super <<'SQL' || fail_with_log postgres "$PG_LOG"
DO $$BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'oe') THEN CREATE ROLE oe; END IF;
END$$;
ALTER ROLE oe WITH LOGIN SUPERUSER PASSWORD 'oe';
SELECT 'CREATE DATABASE oe OWNER oe' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'oe')\gexec
SQL
	pg_oe -tAc 'SELECT 1' >/dev/null || fail_with_log "postgres (TCP login as oe)" "$PG_LOG"
}

pg_start() {
	mkdir -p "$PG_DIR"
	if is_root; then
		id postgres >/dev/null 2>&1 || die "postgres: OS user 'postgres' does not exist (is the postgresql package installed?)"
		chown postgres: "$PG_DIR"
		runuser -u postgres -- test -w "$PG_DIR" ||
			die "postgres: user postgres cannot reach $PG_DIR; choose an OE_STATE_DIR every user can traverse (e.g. under /tmp)"
	fi
	local pid
	if pid="$(pid_of "$PG_PIDFILE" postgres)"; then
		if wait_ready 20 "$PG_PIDFILE" postgres pg_ready; then
			pg_setup
			log "postgres: reusing pid $pid on 127.0.0.1:$PG_PORT"
			return 0
		fi
		log "postgres: pid $pid does not answer; restarting it"
		stop_pid "$pid" postgres INT 30
	fi
	rm -f "$PG_PIDFILE" "$PG_DIR/.s.PGSQL.$PG_PORT" "$PG_DIR/.s.PGSQL.$PG_PORT.lock"
	ensure_port_free "$PG_PORT" postgres

	local version
	version="$(basename "$(dirname "$PG_BIN")")"
	if [[ ! -s $PG_DATA/PG_VERSION || "$(cat "$PG_DATA/PG_VERSION")" != "$version" ]]; then
		log "postgres: initialising $PG_DATA (PostgreSQL $version)"
		rm -rf "$PG_DATA"
		as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
			--encoding=UTF8 --no-locale --no-sync >"$PG_DIR/initdb.log" 2>&1 ||
			fail_with_log initdb "$PG_DIR/initdb.log"
	fi
	as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t "$READY_TIMEOUT" \
		-o "-p $PG_PORT -k '$PG_DIR' -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
		start >"$PG_DIR/pg_ctl.out" 2>&1 9>&- || {
		cat "$PG_DIR/pg_ctl.out" >&2
		fail_with_log postgres "$PG_LOG"
	}
	wait_ready "$READY_TIMEOUT" "$PG_PIDFILE" postgres pg_ready || fail_with_log postgres "$PG_LOG"
	pg_setup
	log "postgres: started pid $(pid_of "$PG_PIDFILE" postgres || echo '?') on 127.0.0.1:$PG_PORT"
}

pg_stop() {
	local pid
	if pid="$(pid_of "$PG_PIDFILE" postgres)"; then
		# SIGINT is PostgreSQL's "fast" shutdown: roll back, disconnect, exit with all children.
		stop_pid "$pid" postgres INT 60
		log "postgres: stopped pid $pid"
	fi
}

# ---------------------------------------------------------------------------------------------
# RocketMQ (optional, provided by rocketmq.sh)

# OE_SKIP_ROCKETMQ=1 ignores rocketmq.sh (no Java needed; RocketMQ tests then skip or fail).
RMQ_ENV_FILE="$STATE_DIR/rocketmq.env" # OE_ROCKETMQ_NAMESRV as rmq_start exported it

rmq_load() {
	[[ ${OE_SKIP_ROCKETMQ:-0} != 1 && -f $RMQ_SCRIPT ]] || return 1
	# shellcheck source=/dev/null
	source "$RMQ_SCRIPT"
}

# ---------------------------------------------------------------------------------------------
# MariaDB Galera Cluster (optional, provided by galera.sh)

# OE_SKIP_GALERA=1 ignores galera.sh (its tests then skip, or fail when servers are required).
gal_load() {
	[[ ${OE_SKIP_GALERA:-0} != 1 && -f $GAL_SCRIPT ]] || return 1
	# shellcheck source=/dev/null
	source "$GAL_SCRIPT"
}

# ---------------------------------------------------------------------------------------------
# PostgreSQL under Patroni and etcd (optional, provided by patroni.sh)

# OE_SKIP_PATRONI=1 ignores patroni.sh (its tests then skip, or fail when servers are required).
pat_load() {
	[[ ${OE_SKIP_PATRONI:-0} != 1 && -f $PAT_SCRIPT ]] || return 1
	# shellcheck source=/dev/null
	source "$PAT_SCRIPT"
}

# ---------------------------------------------------------------------------------------------
# Commands

lock_state() {
	mkdir -p "$STATE_DIR"
	chmod 755 "$STATE_DIR" 2>/dev/null || true
	exec 9>"$STATE_DIR/.lock"
	flock -w 600 9 || die "another services.sh holds $STATE_DIR/.lock"
}

cmd_start() {
	local t0=$SECONDS
	install_missing
	lock_state
	redis_start
	redis_pair_start
	redis_cluster_start
	mysql_start
	pg_start
	if rmq_load; then
		rm -f "$RMQ_ENV_FILE"
		rmq_start 9>&- || die "rocketmq: rmq_start failed (OE_SKIP_ROCKETMQ=1 skips RocketMQ)" # 9>&-: the JVMs must not hold the lock
		[[ -n ${OE_ROCKETMQ_NAMESRV:-} ]] || die "rmq_start did not export OE_ROCKETMQ_NAMESRV"
		printf '%s\n' "$OE_ROCKETMQ_NAMESRV" >"$RMQ_ENV_FILE"
	fi
	if gal_load; then
		gal_start 9>&- || die "galera: gal_start failed (OE_SKIP_GALERA=1 skips the Galera cluster)" # 9>&-: mariadbd must not hold the lock
	fi
	if pat_load; then
		pat_start 9>&- || die "patroni: pat_start failed (OE_SKIP_PATRONI=1 skips the Patroni cluster)" # 9>&-: etcd, Patroni and postgres must not hold the lock
	fi
	log "all services ready in $((SECONDS - t0))s (state: $STATE_DIR)"
}

cmd_stop() {
	find_bins
	lock_state
	# Each server stops on its own, at once: the JVMs' shutdown hooks and
	# the clusters' nodes take most of the time, and nothing here depends on
	# another server being gone first.
	local rc=0 pid pids=()
	if rmq_load; then
		(
			rmq_stop 9>&- || {
				rc=$?
				log "rmq_stop failed (exit $rc)"
				exit "$rc"
			}
			rm -f "$RMQ_ENV_FILE"
		) &
		pids+=($!)
	fi
	if gal_load; then
		(gal_stop || {
			rc=$?
			log "gal_stop failed (exit $rc)"
			exit "$rc"
		}) &
		pids+=($!)
	fi
	if pat_load; then
		(pat_stop || {
			rc=$?
			log "pat_stop failed (exit $rc)"
			exit "$rc"
		}) &
		pids+=($!)
	fi
	(
		redis_stop
		redis_pair_stop
		redis_cluster_stop
		log "redis cluster: stopped"
	) &
	pids+=($!)
	(mysql_stop) &
	pids+=($!)
	(pg_stop) &
	pids+=($!)
	for pid in "${pids[@]}"; do
		wait "$pid" || rc=$?
	done
	log "stopped"
	return "$rc"
}

cmd_status() {
	find_bins
	local ok=0 pid
	if pid="$(pid_of "$REDIS_PIDFILE" redis-server)" && [[ -n $REDIS_CLI ]] && redis_ping; then
		log "redis:    running, pid $pid, answering on 127.0.0.1:$REDIS_PORT"
	else
		log "redis:    not running"
		ok=1
	fi
	if [[ -n $REDIS_CLI ]] && rp_ok; then
		log "redis pair: running, primary 127.0.0.1:$REDIS_PRIMARY_PORT, replica 127.0.0.1:$REDIS_REPLICA_PORT following it"
	else
		log "redis pair: not running (or the replica does not follow the primary)"
		ok=1
	fi
	if [[ -n $REDIS_CLI ]] && rc_ok; then
		log "redis cluster: running, ok on $(rc_nodes)"
	else
		log "redis cluster: not running"
		ok=1
	fi
	if pid="$(pid_of "$MYSQL_PIDFILE" mariadbd)" && [[ -n $MYSQL_CLIENT ]] && TMO=5 mysql_oe -N -e 'SELECT 1' oe >/dev/null 2>&1; then
		log "mariadb:  running, pid $pid, answering on 127.0.0.1:$MYSQL_PORT"
	else
		log "mariadb:  not running"
		ok=1
	fi
	if pid="$(pid_of "$PG_PIDFILE" postgres)" && [[ -n $PG_BIN ]] && TMO=5 pg_oe -tAc 'SELECT 1' >/dev/null 2>&1; then
		log "postgres: running, pid $pid, answering on 127.0.0.1:$PG_PORT"
	else
		log "postgres: not running"
		ok=1
	fi
	if gal_load; then
		local line out
		out="$(gal_status 2>&1)" || ok=1
		while IFS= read -r line; do log "galera $line"; done <<<"$out"
	fi
	if pat_load; then
		local line out
		out="$(pat_status 2>&1)" || ok=1
		while IFS= read -r line; do log "patroni $line"; done <<<"$out"
	fi
	return "$ok"
}

cmd_env() {
	echo "export OE_MYSQL_DSN='oe:oe@tcp(127.0.0.1:$MYSQL_PORT)/oe'"
	echo "export OE_PG_DSN='postgres://oe:oe@127.0.0.1:$PG_PORT/oe?sslmode=disable'"
	echo "export OE_REDIS_ADDR=127.0.0.1:$REDIS_PORT"
	echo "export OE_REDIS_CLUSTER=$(rc_nodes | tr ' ' ',')"
	echo "export OE_REDIS_CLUSTER_REPLICAS=$(rc_replica_nodes | tr ' ' ',')"
	echo "export OE_REDIS_PRIMARY=127.0.0.1:$REDIS_PRIMARY_PORT"
	echo "export OE_REDIS_REPLICA=127.0.0.1:$REDIS_REPLICA_PORT"
	echo "export OE_SERVICES_SH='$HERE/services.sh'"
	echo "export OE_SERVICES_STATE='$STATE_DIR'"
	if rmq_load >/dev/null; then
		local namesrv="${OE_ROCKETMQ_NAMESRV:-}"
		[[ -s $RMQ_ENV_FILE ]] && namesrv="$(head -n1 "$RMQ_ENV_FILE")"
		[[ -z $namesrv ]] || echo "export OE_ROCKETMQ_NAMESRV='$namesrv'"
		[[ -z $namesrv ]] || echo "export OE_ROCKETMQ_BROKER='127.0.0.1:${RMQ_BROKER_PORT:-20911}'"
		[[ -z $namesrv ]] || echo "export OE_ROCKETMQ_BROKER_B='127.0.0.1:$RMQ_BROKER_B_PORT'"
	fi
	if gal_load; then
		gal_env
	fi
	if pat_load; then
		pat_env
	fi
}

cmd_clean() {
	cmd_stop
	rm -rf "$STATE_DIR"
	log "removed $STATE_DIR"
}

# cmd_pid NAME: the pid of one server, for a fault test to kill.
cmd_pid() {
	case "${1:-}" in
	redis-primary | redis-replica) pid_of "$(rp_dir "${1#redis-}")/redis.pid" redis-server ;;
	redis-cluster-*)
		local p
		p="$(rc_port "$1")"
		pid_of "$RC_DIR/$p/redis.pid" redis-server
		;;
	broker-a | broker-b)
		rmq_load || die "RocketMQ is not enabled here"
		local b=broker
		[[ $1 == broker-b ]] && b=broker-b
		_rmq_pid "$b"
		;;
	galera-[123])
		gal_load || die "the Galera cluster is not enabled here"
		gal_pid "${1#galera-}"
		;;
	*) die "pid: unknown server '${1:-}' (redis-primary, redis-replica, redis-cluster-PORT, broker-a, broker-b, galera-N)" ;;
	esac
}

# cmd_start_one NAME: start one server again on the data it has (after a fault test killed it).
cmd_start_one() {
	find_bins
	lock_state
	case "${1:-}" in
	redis-primary | redis-replica) rp_start_one "${1#redis-}" ;;
	redis-pair) redis_pair_start ;;
	redis-cluster-*) rc_start_node "$(rc_port "$1")" ;;
	broker-a | broker-b)
		rmq_load || die "RocketMQ is not enabled here"
		local b=broker
		[[ $1 == broker-b ]] && b=broker-b
		rmq_start_broker "$b" 9>&-
		;;
	galera-[123])
		gal_load || die "the Galera cluster is not enabled here"
		gal_start_node "${1#galera-}" 9>&-
		;;
	*) die "start-one: unknown server '${1:-}' (redis-primary, redis-replica, redis-pair, redis-cluster-PORT, broker-a, broker-b, galera-N)" ;;
	esac
}

case "${1:-}" in
start) cmd_start ;;
pid) cmd_pid "${2:-}" ;;
start-one) cmd_start_one "${2:-}" ;;
stop) cmd_stop ;;
status) cmd_status ;;
env) cmd_env ;;
clean) cmd_clean ;;
*)
	echo "usage: $0 start|stop|status|env|clean|pid NAME|start-one NAME" >&2
	exit 2
	;;
esac
