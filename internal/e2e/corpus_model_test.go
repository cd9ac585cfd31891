package e2e_test

// The model test (model_test.go) on every corpus schema that maps
// (internal/corpus: public projects' order tables with the additions their
// host makes), on MariaDB and PostgreSQL, as on SeatFlow's tables
// (mapping_model_test.go). The model's user and show ids reach a numeric
// column as numbers (corpus.IDs, a bijection), as a host would pass its
// own; what a mapping cannot do is left out of the run: a late payment is
// refunded where the mapping cannot tell a timeout's cancel from a user's,
// and a deadline kept as the creation time plus a window does not move.

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/corpus"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

func TestModelCorpusMariaDB(t *testing.T) {
	mRunCorpus(t, sqlstore.MySQL, testenv.MySQL)
}

func TestModelCorpusPostgres(t *testing.T) {
	mRunCorpus(t, sqlstore.Postgres, testenv.Postgres)
}

// mRunCorpus runs the model on each corpus schema that maps in d, in a
// database of its own.
func mRunCorpus(t *testing.T, d sqlstore.Dialect, open func(testing.TB) *sql.DB) {
	// Set once for the parallel subtests (they read rapid's flags), and
	// restored when the last of them is done. Four runs of each of the
	// sixteen schemas and databases per test command, fewer in all than
	// the six of twelve before the two ticketing systems came (ten of
	// twelve took about 290 s of the race run's saturated CPU, and six of
	// sixteen put the test command past its 15 minutes: CI run 101, 909 s);
	// each command draws new ones, and -rapid.checks=N runs more.
	mRapidBudget(t, 4, 40, true)
	for _, e := range corpus.Entries {
		if !e.Maps(d) {
			continue
		}
		t.Run(e.Name, func(t *testing.T) {
			t.Parallel() // each in a database and a Redis namespace of its own
			mRunMapped(t, "corpus-"+e.Name+"-"+string(d), open(t), d, e)
		})
	}
}

// mRunMapped is mRunSeatFlow on a corpus entry's tables.
func mRunMapped(t *testing.T, name string, db *sql.DB, d sqlstore.Dialect, e corpus.Entry) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	ddl, err := e.FullDDL(d)
	require.NoError(t, err)
	for _, q := range ddl {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	m := e.Final(d)
	store, err := sqlstore.New(db, d, m)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	require.NoError(t, store.Migrate(ctx))
	require.NoError(t, store.Check(ctx))
	// One bijection per id column for the whole test: the rows of one run
	// stay until its cleanup, and a number is never given to two ids.
	var tr corpus.Translated
	if m.Orders.NumericUserID {
		tr.Users = &corpus.IDs{}
	}
	if m.Orders.NumericShowID {
		tr.Shows = &corpus.IDs{}
	}
	if m.Orders.NumericOrderNo {
		tr.Orders = &corpus.IDs{}
	}
	// The store as a host wires it, every transition on: where the mapping
	// cannot reinstate or move a deadline the store itself says so
	// (cancel.ErrNoSeatRecord: the payment is refunded; ErrUnsupported).
	view := tr.View(store, true, true)
	table := strings.ReplaceAll(m.Orders.Table, ".", "_") // the corpus's tables are unqualified
	if d == sqlstore.MySQL {
		table = "`" + table + "`"
	} else {
		table = `"` + table + `"`
	}
	mRun(t, name, func(rt *rapid.T) *mEnv {
		// A short prefix: pretix's order codes are 16 characters.
		prefix := "m" + testenv.Unique()[:6] + "-"
		ns := "oe-" + strings.TrimSuffix(prefix, "-")
		root, err := redisseat.New(rdb, ns)
		if err != nil {
			rt.Fatal(err)
		}
		seats := root.Scoped(store.Scope())
		env := &mEnv{
			prefix: prefix,
			store:  view,
			seats:  seats,
			place: func(ctx context.Context, p cancel.Placement) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				if err := store.Place(ctx, tx, tr.Placement(p)); err != nil {
					_ = tx.Rollback()
					return err
				}
				return tx.Commit()
			},
			grace: 100 * time.Millisecond, settle: 300 * time.Millisecond,
			lease: 20 * time.Millisecond,
			// Whole seconds: DATETIME and timestamp columns.
			resolution: time.Second,
			expiryMin:  -1500 * time.Millisecond, expiryMax: 3500 * time.Millisecond,
			noLate:     !corpus.CanReinstate(m),
			noDeadline: m.Orders.Deadline.Column == "",
			noClaims:   m.Claims == nil,
		}
		ns += ":" + url.QueryEscape(store.Scope())
		keys := func(show string) []string {
			return []string{ns + ":{" + show + "}:seats", ns + ":{" + show + "}:limit", ns + ":{" + show + "}:locked"}
		}
		env.wipeShow = func(show string) {
			if err := rdb.Del(ctx, keys(show)...).Err(); err != nil {
				rt.Fatalf("wipe %s: %v", show, err)
			}
		}
		env.wipe = func() {
			var all []string
			for _, show := range []string{prefix + "showA", prefix + "showB"} {
				all = append(all, keys(show)...)
			}
			all = append(all, ns+":shows", ns+":restored", ns+":rebuild")
			if err := rdb.Del(ctx, all...).Err(); err != nil {
				rt.Fatalf("wipe: %v", err)
			}
		}
		env.cleanup = func([]string) {
			// The database is this test's and its runs follow one another:
			// each leaves no order behind (an order number may be a number
			// of corpus.IDs, no longer of the run's prefix).
			for _, q := range []string{"DELETE FROM " + table, "DELETE FROM oe_order_side", "DELETE FROM oe_payment_discrepancy"} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					rt.Errorf("cleanup: %v", err)
				}
			}
			env.wipe()
		}
		return env
	})
}
