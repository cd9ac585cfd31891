// Package storm is the fault-injection storm test of orderexpiry and its
// tools: thousands of orders on real MariaDB or PostgreSQL with Redis, hit
// at once by timeouts, payments, user cancels, duplicate deliveries and
// reconcilers on several hosts, while faults are injected from outside the
// library (toxiproxy between the library and its servers, a private Redis
// stopped and restarted). Afterwards every invariant (package expiry's documentation,
// I1-I17) that the storm can reach (I1, I2, I3, I4, I5, I8, I9) must hold, and the history of
// every order must be linearizable against a per-order state machine
// (History, Model: porcupine).
//
// The tools: Proxies (toxiproxy in process), RedisProc (a redis-server of
// the test's own), Scheduler, History and its model, ErrKind and Counter.
// Tests only; hosts must not import it. It is a module of its own
// (internal/storm/go.mod, the library through replace => ../..) so that
// toxiproxy, porcupine and zerolog stay out of the library's go.mod and its
// hosts' module graphs: go -C internal/storm test ./...
package storm
