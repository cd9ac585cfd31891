// Package dashboard holds the test that expiry/prometheus's dashboard.json
// imports into Grafana's dashboard schema, decoded strictly with the Go types
// of the Grafana Foundation SDK.
//
// It is a module of its own so that the SDK stays out of the library's
// go.mod: `go -C internal/dashboard test ./...`.
package dashboard
