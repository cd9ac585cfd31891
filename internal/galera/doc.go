// Package galera holds the tests of the library on a three-node MariaDB
// Galera Cluster: certification conflicts between nodes, reads right after
// another node's write, and a node SIGKILLed under load and rejoining.
// README.md in this directory says what they show a host needs, with the
// figures they measured. The cluster is internal/testenv/galera.sh's (services.sh starts
// it); the tests read OE_GALERA_DSNS and skip without it, or fail when
// servers are required (OE_REQUIRE_SERVERS=1 or CI=true).
package galera
