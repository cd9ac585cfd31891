// Package faults holds the broker fault tests: a private RocketMQ name server
// and broker, started, stopped and killed by the test while orders commit and
// delayed messages are in flight. It has no code outside its tests.
package faults
