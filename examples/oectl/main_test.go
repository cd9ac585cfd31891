package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"flag"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// world is a service's state on the test command's servers, as oectl
// finds it: an order due long ago whose message was lost, one still live,
// and one cancelled in SQL whose seats Redis still holds.
type world struct {
	flags []string // oectl's flags naming these servers
	store *sqlstore.Store
	seats *redisseat.Seats
}

func newWorld(t *testing.T, db *sql.DB, d sqlstore.Dialect, dbFlag string) world {
	ctx := context.Background()
	store, err := sqlstore.New(db, d)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	ns := "oectl" + testenv.Unique()
	seats, err := redisseat.New(testenv.Redis(t), ns)
	require.NoError(t, err)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats})
	require.NoError(t, err)
	now, err := store.Now(ctx)
	require.NoError(t, err)
	place := func(no string, expireAt time.Time, seatIDs ...string) {
		p := cancel.Placement{OrderNo: no, UserID: "alice", ShowID: "s1", Seats: seatIDs, ExpireAt: expireAt}
		require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := store.Place(ctx, tx, p); err != nil {
				return errors.Join(err, tx.Rollback())
			}
			return tx.Commit()
		}))
	}
	place("due-1", now.Add(-time.Hour), "A1", "A2")
	place("live-1", now.Add(time.Hour), "B1")
	place("gone-1", now.Add(time.Hour), "C1", "C2")
	// Cancelled in SQL only, as after a crash between the two boundaries,
	// a minute ago: past the reconciler's settle time.
	res, err := store.CancelPending(ctx, cancel.Request{OrderNo: "gone-1", Reason: cancel.ReasonUser})
	require.NoError(t, err)
	require.True(t, res.Changed)
	_, err = db.ExecContext(ctx, "UPDATE oe_order SET updated_at_ms = updated_at_ms - 60000 WHERE order_no = 'gone-1'")
	require.NoError(t, err)
	return world{flags: []string{dbFlag, "-redis", os.Getenv(testenv.EnvRedis), "-namespace", ns}, store: store, seats: seats}
}

// oectl runs the command line and returns what it printed.
func (w world) oectl(t *testing.T, args ...string) (string, error) {
	var out, progress bytes.Buffer
	err := run(context.Background(), append(append([]string{}, w.flags...), args...), &out, &progress)
	t.Logf("$ oectl %s\n%s%s(err: %v)", strings.Join(args, " "), progress.String(), out.String(), err)
	return out.String(), err
}

// spaced matches a table row whatever the column padding.
func spaced(t *testing.T, out string, cells ...string) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^\s*` + strings.Join(quoteAll(cells), `\s+`) + `\s*$`)
	assert.Regexp(t, re, out)
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = regexp.QuoteMeta(s)
	}
	return out
}

func runOperatorSession(t *testing.T, w world) {
	ctx := context.Background()

	out, err := w.oectl(t, "order", "live-1")
	require.NoError(t, err)
	spaced(t, out, "status", "pending")
	assert.Regexp(t, `deadline\s+\S+ \S+ UTC\s+due in 59m`, out)
	assert.Regexp(t, `(?m)^\s+B1\s+locked\s+alice\s+\d{4}-`, out)
	assert.Contains(t, out, "user alice holds 5 seat(s) of show s1")
	assert.NotContains(t, out, "!")

	out, err = w.oectl(t, "order", "gone-1")
	require.NoError(t, err)
	spaced(t, out, "status", "cancelled")
	assert.Regexp(t, `(?m)^\s+C1\s+locked\s+alice`, out)
	assert.Contains(t, out, "! cancelled in SQL but seats still locked in Redis")

	out, err = w.oectl(t, "overdue")
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^due-1\s+alice\s+s1\s+\S+ \S+ UTC\s+1h0m`, out)
	assert.NotContains(t, out, "live-1")
	assert.Regexp(t, `^1 pending order\(s\) past their deadline, the oldest by 1h0m[0-9.]*s \(the database's clock\)`, out)

	out, err = w.oectl(t, "reconcile", "-dry-run")
	require.NoError(t, err)
	assert.Contains(t, out, "would do (dry run, nothing changed)")
	spaced(t, out, "expired orders cancelled", "1")
	spaced(t, out, "seats released", "2") // gone-1's two seats; due-1's are its cancel's
	o, err := w.store.Order(ctx, "due-1")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPending, o.Status, "a dry run changes nothing")
	show, err := w.seats.Show(ctx, "s1")
	require.NoError(t, err)
	assert.Len(t, show, 5, "a dry run releases nothing")

	out, err = w.oectl(t, "reconcile")
	require.NoError(t, err)
	assert.Contains(t, out, "rebuilt from SQL's claims", "a namespace never rebuilt counts as lost")
	spaced(t, out, "expired orders cancelled", "1")
	spaced(t, out, "seats released", "2")
	o, err = w.store.Order(ctx, "due-1")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusCancelled, o.Status)
	show, err = w.seats.Show(ctx, "s1")
	require.NoError(t, err)
	assert.Len(t, show, 1, "only live-1's seat is left")

	out, err = w.oectl(t, "overdue")
	require.NoError(t, err)
	assert.Equal(t, "no pending order is past its deadline\n", out)
	out, err = w.oectl(t, "order", "gone-1")
	require.NoError(t, err)
	assert.Contains(t, out, "no seat locked or sold for this order")
	assert.NotContains(t, out, "!")

	_, err = w.oectl(t, "order", "nope")
	assert.ErrorContains(t, err, "order nope: not in SQL")

	// An operator grants live-1 two hours: the maximum hold (an hour from
	// placement, cancel.MaxHoldDefault) stops it there. Again (changes
	// nothing: "at least"), then expires it.
	out, err = w.oectl(t, "extend", "live-1", "2h")
	require.NoError(t, err)
	assert.Regexp(t, `order live-1: deadline moved from \S+ \S+ UTC to \S+ \S+ UTC \(due in (59m\S+|1h0m0s)\)`, out)
	out, err = w.oectl(t, "extend", "live-1", "90m")
	require.NoError(t, err)
	assert.Contains(t, out, "not changed, its deadline")
	out, err = w.oectl(t, "extend", "due-1", "1h")
	require.NoError(t, err)
	assert.Contains(t, out, "order due-1: not changed, it is cancelled")
	out, err = w.oectl(t, "expire", "live-1")
	require.NoError(t, err)
	assert.Equal(t, "order live-1: cancelled now (reason expired); 1 of 1 seat(s) released in Redis\n", out)
	out, err = w.oectl(t, "expire", "live-1")
	require.NoError(t, err)
	assert.Equal(t, "order live-1: not changed, it is cancelled\n", out)
	show, err = w.seats.Show(ctx, "s1")
	require.NoError(t, err)
	assert.Empty(t, show)
}

func TestOperatorSessionMariaDB(t *testing.T) {
	db := testenv.MySQL(t)
	var name string
	require.NoError(t, db.QueryRow("SELECT DATABASE()").Scan(&name))
	cfg, err := mysql.ParseDSN(os.Getenv(testenv.EnvMySQL))
	require.NoError(t, err)
	cfg.DBName = name
	runOperatorSession(t, newWorld(t, db, sqlstore.MySQL, "-mysql="+cfg.FormatDSN()))
}

func TestOperatorSessionPostgres(t *testing.T) {
	db := testenv.Postgres(t)
	var schema string
	require.NoError(t, db.QueryRow("SELECT current_schema()").Scan(&schema))
	u, err := url.Parse(os.Getenv(testenv.EnvPostgres))
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	runOperatorSession(t, newWorld(t, db, sqlstore.Postgres, "-postgres="+u.String()))
}

func TestCommandLineErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"order"}, "order takes one order number"},
		{[]string{"overdue", "-n", "0"}, "N at least 1"},
		{[]string{"reconcile", "now"}, "reconcile [-dry-run]"},
		{[]string{"extend", "A1"}, "an order number and a duration"},
		{[]string{"extend", "A1", "-5m"}, "not a positive duration"},
		{[]string{"expire"}, "one order number"},
		{[]string{"overdue"}, "exactly one of -mysql, -postgres, -sqlite"},
		{[]string{"-mysql", "x", "-sqlite", "y", "overdue"}, "exactly one of"},
		{[]string{"-bogus"}, "flag provided but not defined"},
	} {
		var out bytes.Buffer
		err := run(context.Background(), tc.args, &out, &out)
		assert.ErrorIs(t, err, errUsage, "%q", tc.args)
		assert.ErrorContains(t, err, tc.want, "%q", tc.args)
	}
	var out bytes.Buffer
	require.ErrorIs(t, run(context.Background(), []string{"-h"}, &out, &out), flag.ErrHelp)
	assert.Contains(t, out.String(), "reconcile [-dry-run]")
}
