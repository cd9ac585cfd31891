// Package faults holds the broker fault tests: a private RocketMQ name server
// and broker, started, stopped and killed by the test while orders commit and
// delayed messages are in flight, or started without the timer wheel to see
// timer messages refused. It has no code outside its tests.
package faults
