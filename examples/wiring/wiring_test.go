// Package wiring_test holds the whole wiring of a host service, as the
// README shows it: the README's block is checked against the example below,
// so the two cannot drift.
package wiring_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/inproc"
	"github.com/seatflow/orderexpiry/reconcile"
)

// wire is what a host adds to its service: the library on the host's own
// *sql.DB and Redis client, with its logger and observer in rt, the in-process transport standing in for
// expiry/rocketmq, the reconciler running until ctx ends, and the two calls
// the host's handlers make.
func wire(ctx context.Context, db *sql.DB, rdb redis.UniversalClient, rt expiry.Runtime, refund func(context.Context, cancel.Discrepancy) error) (place func(context.Context, cancel.Placement) error, pay func(context.Context, cancel.Payment) error, err error) {
	// wiring:begin
	store, err1 := sqlstore.New(db, sqlstore.MySQL)
	seats, err2 := redisseat.New(rdb, "")
	sender := inproc.New(inproc.Config{Runtime: rt}) // or expiry/rocketmq's Sender and Consumer
	sched, err3 := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender, Runtime: rt})
	svc, err4 := cancel.New(cancel.Config{Store: store, Seats: seats, Scheduler: sched, OnDiscrepancy: refund, Runtime: rt})
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, nil, err
	}
	handler, err5 := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sender, Runtime: rt})
	rec, err6 := reconcile.New(reconcile.Config{Orders: store, Seats: seats, Service: svc, Runtime: rt})
	if err := errors.Join(err5, err6, seats.Check(ctx)); err != nil {
		return nil, nil, err
	}
	sender.Attach(expiry.NewShell(handler))
	go rec.Run(ctx, 5*time.Minute) // on every instance
	place = func(ctx context.Context, p cancel.Placement) error {
		// At most 4 seats of a show per user, late payments included.
		p.Limit = 4
		return svc.Place(ctx, p, store.Insert(db, nil)) // nil: no rows of the host's own
	}
	pay = func(ctx context.Context, p cancel.Payment) error {
		_, err := svc.Pay(ctx, p)
		return err
	}
	// wiring:end
	return place, pay, nil
}

// The whole wiring of a host (it needs a database and Redis to run: see
// examples/httpservice for one that runs).
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	db, err := sql.Open("mysql", "user:pass@tcp(db:3306)/shop")
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379"})
	rt := expiry.Runtime{Logger: slog.Default()} // and Observer: expiry/prometheus, say
	place, pay, err := wire(ctx, db, rdb, rt, func(ctx context.Context, d cancel.Discrepancy) error {
		return nil // refund d.PaymentID at the provider, keyed by it
	})
	if err != nil {
		panic(err)
	}
	_, _ = place, pay
}

// TestREADMEShowsThisWiring keeps the README's wiring block identical to
// the lines between the wiring markers above, and within 25 lines.
func TestREADMEShowsThisWiring(t *testing.T) {
	src, err := os.ReadFile("wiring_test.go")
	require.NoError(t, err)
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	between := func(s, begin, end string) string {
		_, rest, ok := strings.Cut(s, begin)
		require.True(t, ok, "no %q", begin)
		body, _, ok := strings.Cut(rest, end)
		require.True(t, ok, "no %q", end)
		return body
	}
	var want []string
	for _, l := range strings.Split(between(string(src), "// wiring:begin\n", "\t// wiring:end"), "\n") {
		if l = strings.TrimPrefix(l, "\t"); l != "" {
			want = append(want, l)
		}
	}
	block := between(string(readme), "<!-- wiring:begin -->\n```go\n", "```\n<!-- wiring:end -->")
	var got []string
	for _, l := range strings.Split(block, "\n") {
		if l != "" {
			got = append(got, l)
		}
	}
	require.Equal(t, want, got, "README.md's wiring block must be the body of wire in examples/wiring/wiring_test.go")
	require.LessOrEqual(t, len(got), 25, "the whole wiring of a host in 25 lines")
}
