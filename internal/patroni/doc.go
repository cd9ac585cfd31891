// Package patroni holds the tests of the library on PostgreSQL with
// streaming replication under Patroni and etcd: the primary SIGKILLed under
// load in synchronous and in asynchronous mode, the clients reaching the
// promoted replica through a multi-host DSN with
// target_session_attrs=read-write, and what the library does when SQL goes
// back in time (an asynchronous failover that lost the last commits). The
// cluster is internal/testenv/patroni.sh's (services.sh starts it); the
// failover tests read OE_PATRONI_DSN, OE_PATRONI_REST and OE_PATRONI_SH and
// skip without them, or fail when servers are required (OE_REQUIRE_SERVERS=1
// or CI=true). The back-in-time tests need only OE_PG_DSN: they restore a
// table snapshot deterministically instead of racing a failover. README.md
// in this directory says what they show a host needs, with the figures they
// measured.
package patroni
