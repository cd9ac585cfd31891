package e2e_test

// Security and bad input, through the library's API:
//
//   - a user cannot cancel or pay another user's order, nor release or take
//     its seats (cancel.Service and redisseat over sqlstore, on SQLite and
//     MariaDB);
//   - hostile values (empty, 1 MiB, NUL, invalid UTF-8, Redis hash-tag braces,
//     SQL quotes, the '|' of the seat values, very long ids, ...) as order
//     numbers, user ids, show ids and seat ids are rejected with an error
//     wrapping expiry.ErrInvalidID (or dropped and counted, for message
//     bodies), never panic, and change nothing: the rows and the Redis keys
//     are snapshotted around every call;
//   - they are rejected before any SQL or Redis command: the same calls on a
//     store over a closed *sql.DB, a finished transaction or a closed Redis
//     client still answer ErrInvalidID, not "closed";
//   - cancel/sqlstore builds no SQL text from caller data (a reading of
//     store.go's syntax tree).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// hostileIDs are tried in every id position.
var hostileIDs = []struct{ name, v string }{
	{"empty", ""},
	{"1MiB", strings.Repeat("a", 1<<20)},
	{"65 bytes (MaxIDLen+1)", strings.Repeat("a", expiry.MaxIDLen+1)},
	{"4KiB", strings.Repeat("9", 4096)},
	{"NUL inside", "o\x00rder"},
	{"NUL only", "\x00"},
	{"invalid UTF-8", "o\xff\xfe1"},
	{"hash tag", "{x}"},
	{"half hash tag", "show}{x"},
	{"SQL quote", "' OR 1=1 --"},
	{"SQL stacked", "o1'; DROP TABLE oe_order; --"},
	{"double quote", `o"1`},
	{"backslash", `o\'1`},
	{"seat value separator", "o1|u9|0"},
	{"space", "o 1"},
	{"newline", "o1\nINFO fake log line"},
	{"CRLF (RESP)", "o1\r\n*1\r\n$8\r\nFLUSHALL\r\n"},
	{"percent verbs", "%s%n%x"},
	{"LIKE wildcard", "%"},
	{"glob", "oe:*"},
	{"key separator", "oe:shows"},
	{"non-ASCII", "ordér"},
	{"full-width digits", "ｏ１"},
	{"RTL override", "o\u202e1"},
	{"tab", "o\t1"},
}

func TestSecuritySQLite(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "sec.db")+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	securityTest(t, "sqlite", db, sqlstore.SQLite)
}

func TestSecurityMariaDB(t *testing.T) {
	securityTest(t, "mariadb", testenv.MySQL(t), sqlstore.MySQL)
}

// secWorld is the library on one database and one Redis namespace, with an
// observer and a recording sender.
type secWorld struct {
	db      *sql.DB
	rdb     *redis.Client
	ns      string
	store   *sqlstore.Store
	seats   *redisseat.Seats
	svc     *cancel.Service
	handler *expiry.Handler
	shell   *expiry.Shell
	sched   *expiry.Scheduler
	obs     *mObserver
	sent    *secSender
}

type secSender struct{ n int }

func (s *secSender) Send(context.Context, expiry.Message, time.Duration) error { s.n++; return nil }

func newSecWorld(t *testing.T, db *sql.DB, d sqlstore.Dialect, rdb *redis.Client, ns string) *secWorld {
	w := &secWorld{db: db, rdb: rdb, ns: ns, obs: &mObserver{kinds: map[expiry.Kind]int{}, cancelled: map[string]int{}, paid: map[string]int{}}, sent: &secSender{}}
	var err error
	w.store, err = sqlstore.New(db, d)
	require.NoError(t, err)
	w.seats, err = redisseat.New(rdb, ns)
	require.NoError(t, err)
	quiet := secQuiet()
	w.svc, err = cancel.New(cancel.Config{Store: w.store, Seats: w.seats, Runtime: expiry.Runtime{Observer: w.obs, Logger: quiet}})
	require.NoError(t, err)
	w.handler, err = expiry.NewHandler(expiry.HandlerConfig{Canceller: w.svc, Sender: w.sent, Runtime: expiry.Runtime{Observer: w.obs, Logger: quiet}})
	require.NoError(t, err)
	w.shell = expiry.NewShell(w.handler)
	w.sched, err = expiry.NewScheduler(expiry.SchedulerConfig{Sender: w.sent, Runtime: expiry.Runtime{Observer: w.obs, Logger: quiet}})
	require.NoError(t, err)
	return w
}

func (w *secWorld) place(t *testing.T, p cancel.Placement) {
	require.NoError(t, w.svc.Place(context.Background(), p, w.store.Insert(w.db, nil)))
}

// snapshot is every row of both tables and every Redis key of the namespace.
func (w *secWorld) snapshot(t *testing.T) map[string]any {
	ctx := context.Background()
	out := map[string]any{}
	for name, q := range map[string]string{
		"oe_order":      "SELECT order_no, user_id, show_id, status, expire_at_ms, COALESCE(cancel_reason, '') FROM oe_order ORDER BY order_no",
		"oe_order_seat": "SELECT show_id, seat_id, order_no, state, '', '' FROM oe_order_seat ORDER BY show_id, seat_id",
	} {
		rows, err := w.db.QueryContext(ctx, q)
		require.NoError(t, err)
		var all [][6]string
		for rows.Next() {
			var r [6]string
			require.NoError(t, rows.Scan(&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]))
			all = append(all, r)
		}
		require.NoError(t, rows.Err())
		rows.Close()
		out[name] = all
	}
	keys, err := w.rdb.Keys(ctx, w.ns+":*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		switch typ := w.rdb.Type(ctx, k).Val(); typ {
		case "hash":
			out[k] = w.rdb.HGetAll(ctx, k).Val()
		case "set":
			m := w.rdb.SMembers(ctx, k).Val()
			slices.Sort(m)
			out[k] = m
		default:
			out[k] = typ
		}
	}
	return out
}

func secQuiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// secTally counts hostile inputs.
type secTally struct {
	inputs, rejected, panics int
	byOp                     map[string]int
}

// try runs call with one hostile input and checks it: no panic, rejected
// (ok reports whether the result is a rejection), nothing changed.
func (s *secTally) try(t *testing.T, w *secWorld, op, what string, call func() (rejected bool, detail string)) {
	t.Helper()
	before := w.snapshot(t)
	s.inputs++
	s.byOp[op]++
	var rejected bool
	var detail string
	func() {
		defer func() {
			if p := recover(); p != nil {
				s.panics++
				buf := make([]byte, 4096)
				t.Errorf("%s with %s panicked: %v\n%s", op, what, p, buf[:runtime.Stack(buf, false)])
			}
		}()
		rejected, detail = call()
	}()
	if rejected {
		s.rejected++
	} else {
		t.Errorf("%s with %s was not rejected as an invalid id: %s", op, what, detail)
	}
	if after := w.snapshot(t); !reflect.DeepEqual(before, after) {
		t.Errorf("%s with %s changed the stores:\nbefore %v\nafter  %v", op, what, before, after)
	}
}

func isInvalid(err error) (bool, string) {
	return errors.Is(err, expiry.ErrInvalidID), fmt.Sprintf("err = %.200v", err)
}

func securityTest(t *testing.T, name string, db *sql.DB, d sqlstore.Dialect) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	ns := "oe-sec-" + testenv.Unique()
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), ns+":*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	w := newSecWorld(t, db, d, rdb, ns)
	require.NoError(t, w.store.Migrate(ctx))

	// Dead twins: the same library over a closed database and a closed Redis
	// client. A call that answers ErrInvalidID there was rejected before any
	// SQL statement or Redis command.
	deadDB, err := sql.Open("sqlite", ":memory:")
	require.NoError(t, err)
	require.NoError(t, deadDB.Close())
	deadRedis := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	require.NoError(t, deadRedis.Close())
	dead := newSecWorld(t, deadDB, d, deadRedis, ns)
	doneTx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, doneTx.Rollback())

	now, err := w.store.Now(ctx)
	require.NoError(t, err)
	show := "show1"
	a := cancel.Placement{OrderNo: "sec-a", UserID: "alice", ShowID: show, Seats: []string{"a1", "a2"}, ExpireAt: now.Add(time.Hour)}
	b := cancel.Placement{OrderNo: "sec-b", UserID: "bob", ShowID: show, Seats: []string{"b1"}, ExpireAt: now.Add(time.Hour)}
	paid := cancel.Placement{OrderNo: "sec-p", UserID: "alice", ShowID: show, Seats: []string{"p1"}, ExpireAt: now.Add(time.Hour)}
	gone := cancel.Placement{OrderNo: "sec-x", UserID: "bob", ShowID: show, Seats: []string{"x1"}, ExpireAt: now.Add(-time.Second)}
	for _, p := range []cancel.Placement{a, b, paid, gone} {
		w.place(t, p)
	}
	_, err = w.svc.Pay(ctx, cancel.Payment{OrderNo: paid.OrderNo, UserID: paid.UserID, PaymentID: "sec-pay"})
	require.NoError(t, err)
	_, err = w.svc.UserCancel(ctx, gone.OrderNo, gone.UserID)
	require.NoError(t, err)

	t.Run("OtherUsersOrders", func(t *testing.T) {
		before := w.snapshot(t)
		for _, c := range []struct {
			what string
			call func() error
		}{
			{"bob cancels alice's pending order", func() error { _, err := w.svc.UserCancel(ctx, a.OrderNo, "bob"); return err }},
			{"bob pays alice's pending order", func() error {
				_, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: a.OrderNo, UserID: "bob", PaymentID: "sec-pay-b"})
				return err
			}},
			{"bob cancels alice's paid order", func() error { _, err := w.svc.UserCancel(ctx, paid.OrderNo, "bob"); return err }},
			{"alice cancels bob's cancelled order", func() error { _, err := w.svc.UserCancel(ctx, gone.OrderNo, "alice"); return err }},
			{"alice pays bob's pending order", func() error {
				_, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: b.OrderNo, UserID: "alice", PaymentID: "sec-pay-a"})
				return err
			}},
			{"alice pays bob's cancelled order", func() error {
				_, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: gone.OrderNo, UserID: "alice", PaymentID: "sec-pay-a2"})
				return err
			}},
		} {
			assert.ErrorIs(t, c.call(), cancel.ErrNotOwner, c.what)
		}
		// The seat store: another order's seats cannot be released, sold or
		// taken through it, whoever the hold names as user.
		n, err := w.seats.Release(ctx, cancel.Hold{ShowID: show, OrderNo: b.OrderNo, UserID: "alice", Seats: a.Seats})
		assert.NoError(t, err)
		assert.Zero(t, n, "releasing alice's seats in bob's name frees nothing")
		n, err = w.seats.Sell(ctx, cancel.Hold{ShowID: show, OrderNo: b.OrderNo, UserID: "bob", Seats: append(slices.Clone(a.Seats), paid.Seats...)})
		assert.NoError(t, err)
		assert.Zero(t, n, "selling alice's seats to bob's order marks nothing")
		_, err = w.seats.Lock(ctx, cancel.Hold{ShowID: show, OrderNo: "sec-new", UserID: "bob", Seats: []string{"a1"}}, 0)
		assert.ErrorIs(t, err, cancel.ErrSeatUnavailable)
		assert.Equal(t, before, w.snapshot(t), "nothing changed")
		assert.Zero(t, w.obs.kinds[expiry.KindDiscrepancy], "a refused payment is not a discrepancy")

		// Positive control: the owner can.
		res, err := w.svc.UserCancel(ctx, a.OrderNo, "alice")
		require.NoError(t, err)
		assert.True(t, res.Changed)
		assert.Equal(t, 2, res.Released)
		w.place(t, cancel.Placement{OrderNo: "sec-a2", UserID: "alice", ShowID: show, Seats: a.Seats, ExpireAt: now.Add(time.Hour)})
	})

	tally := &secTally{byOp: map[string]int{}}
	t.Run("HostileIDs", func(t *testing.T) {
		for _, h := range hostileIDs {
			v := h.v
			what := fmt.Sprintf("%s (%d bytes)", h.name, len(v))
			placement := func(field string) cancel.Placement {
				p := cancel.Placement{OrderNo: "sec-h", UserID: "mallory", ShowID: show, Seats: []string{"h1"}, ExpireAt: now.Add(time.Hour)}
				switch field {
				case "order":
					p.OrderNo = v
				case "user":
					p.UserID = v
				case "show":
					p.ShowID = v
				case "seat":
					p.Seats = []string{"h2", v}
				}
				return p
			}
			for _, field := range []string{"order", "user", "show", "seat"} {
				p := placement(field)
				tally.try(t, w, "Place/"+field, what, func() (bool, string) {
					// On a finished transaction: any statement would fail with
					// sql.ErrTxDone, so ErrInvalidID means none was sent.
					err := w.store.Place(ctx, doneTx, p)
					if errors.Is(err, sql.ErrTxDone) {
						return false, "reached SQL: " + err.Error()
					}
					if ok, detail := isInvalid(err); !ok {
						return false, detail
					}
					tx, err := db.BeginTx(ctx, nil)
					require.NoError(t, err)
					defer tx.Rollback()
					return isInvalid(w.store.Place(ctx, tx, p))
				})
				hold := p.Hold()
				for _, op := range []string{"Lock", "Release", "Sell"} {
					tally.try(t, w, op+"/"+field, what, func() (bool, string) {
						run := func(s *redisseat.Seats) error {
							var err error
							switch op {
							case "Lock":
								_, err = s.Lock(ctx, hold, 0)
							case "Release":
								_, err = s.Release(ctx, hold)
							default:
								_, err = s.Sell(ctx, hold)
							}
							return err
						}
						if ok, detail := isInvalid(run(dead.seats)); !ok {
							return false, "on a closed Redis client: " + detail
						}
						return isInvalid(run(w.seats))
					})
				}
			}
			tally.try(t, w, "Show/show", what, func() (bool, string) {
				_, err := w.seats.Show(ctx, v)
				return isInvalid(err)
			})

			// The service: every entry point, every id it takes.
			type svcCall struct {
				op   string
				call func(s *secWorld) error
			}
			calls := []svcCall{
				{"Pay/order", func(s *secWorld) error {
					_, err := s.svc.Pay(ctx, cancel.Payment{OrderNo: v, UserID: "alice", PaymentID: "sec-p"})
					return err
				}},
				{"Pay/order(no user)", func(s *secWorld) error {
					_, err := s.svc.Pay(ctx, cancel.Payment{OrderNo: v, PaymentID: "sec-p"})
					return err
				}},
				{"UserCancel/order", func(s *secWorld) error { _, err := s.svc.UserCancel(ctx, v, "alice"); return err }},
				{"UserCancel/user", func(s *secWorld) error { _, err := s.svc.UserCancel(ctx, b.OrderNo, v); return err }},
				{"Cancel/order", func(s *secWorld) error {
					_, err := s.svc.Cancel(ctx, cancel.Request{OrderNo: v, Reason: cancel.ReasonUser})
					return err
				}},
				{"Timeout/order", func(s *secWorld) error { _, _, err := s.svc.Timeout(ctx, v); return err }},
				{"Handler.Handle/order", func(s *secWorld) error {
					// Not an error (redelivery cannot help): "missing", without
					// asking the store, which on the closed database would fail.
					out, err := s.handler.Handle(ctx, expiry.Message{OrderNo: v, Hop: 1})
					if err == nil && out == expiry.OutcomeMissing {
						return fmt.Errorf("handled as missing: %w", expiry.ErrInvalidID)
					}
					return fmt.Errorf("outcome %v, err %v", out, err)
				}},
				{"Store.Order/order", func(s *secWorld) error { _, err := s.store.Order(ctx, v); return err }},
			}
			if v != "" { // an empty user id is valid for Pay: a callback that names no user
				calls = append(calls, svcCall{"Pay/user", func(s *secWorld) error {
					_, err := s.svc.Pay(ctx, cancel.Payment{OrderNo: b.OrderNo, UserID: v, PaymentID: "sec-p"})
					return err
				}})
			}
			for _, c := range calls {
				tally.try(t, w, c.op, what, func() (bool, string) {
					if ok, detail := isInvalid(c.call(dead)); !ok {
						return false, "on a closed database: " + detail
					}
					return isInvalid(c.call(w))
				})
			}

			// After commit: the scheduler refuses to send it.
			tally.try(t, w, "Schedule/order", what, func() (bool, string) {
				sent, failed := w.sent.n, w.obs.kinds[expiry.KindSendFailed]
				ok := w.sched.Schedule(ctx, v, now.Add(time.Hour))
				return !ok && w.sent.n == sent && w.obs.kinds[expiry.KindSendFailed] == failed+1,
					fmt.Sprintf("accepted=%v, sends %d→%d", ok, sent, w.sent.n)
			})

			// The consumer: the id in a well-formed body, and the value as the
			// whole body. Dropped (Ack), counted, nothing sent.
			for _, body := range [][]byte{[]byte("oe1 " + v + " 1"), []byte(v)} {
				tally.try(t, w, "Shell.Process/body", what, func() (bool, string) {
					bad, sent := w.obs.kinds[expiry.KindBadMessage], w.sent.n
					verdict := w.shell.Process(ctx, expiry.Delivery{Body: body, TraceID: v})
					return verdict == expiry.Ack && w.obs.kinds[expiry.KindBadMessage] == bad+1 && w.sent.n == sent,
						fmt.Sprintf("verdict %v, bad messages %d→%d", verdict, bad, w.obs.kinds[expiry.KindBadMessage])
				})
			}
			tally.try(t, w, "DecodeMessage", what, func() (bool, string) {
				_, err := expiry.DecodeMessage([]byte("oe1 " + v + " 1"))
				return errors.Is(err, expiry.ErrBadMessage), fmt.Sprintf("err = %.200v", err)
			})
		}
	})

	// Redis key reads that take a show id without checking it. Not counted
	// as rejections: Held answers, it does not reject (see the report).
	t.Run("HeldReadsOnly", func(t *testing.T) {
		before := w.snapshot(t)
		for _, h := range hostileIDs {
			n, err := w.seats.Held(ctx, h.v, "alice")
			if err == nil {
				assert.Zero(t, n, "Held(%s) reads no other show's counter", h.name)
			}
		}
		assert.Equal(t, before, w.snapshot(t))
	})

	if !t.Failed() {
		t.Logf("FIGURE hostile inputs=%d rejected=%d panics=%d backend=%s values=%d", tally.inputs, tally.rejected, tally.panics, name, len(hostileIDs))
		t.Logf("FIGURE hostile %s by operation: %s", name, mFormat(tally.byOp))
	}
}

// TestSQLStoreBuildsNoSQLFromCallerData reads every non-test file of
// cancel/sqlstore and checks that no SQL text can contain caller data.
//
// The store's SQL is built once, in New, from a Mapping: names
// the mapping validated and quoted (ident), constants it validated
// (literal), numbers, and literals of the package. Run-time values only
// ever become arguments, by slot. So the test checks three things:
//
//   - nothing formats strings (fmt.Sprint*, fmt.Append*, fmt.Fprintf);
//   - every string concatenation is on the reviewed list below (and every
//     "+=" appends a string literal): SQL
//     fragments of literals and of the pieces named above, placeholder
//     lists whose only variable part is a count, cursors returned to the
//     caller (they come back as arguments, never as text);
//   - every argument of the statement builder's w (build.go, the only way
//     text enters a statement) is a string literal, a field of the
//     resolved mapping, a call of the reviewed expression functions, or one
//     of the reviewed local names, each holding only such pieces.
//
// Any new concatenation or builder argument fails the test until someone
// reviews it and adds it here. The behaviour tests above show the other
// half: ids with quotes never reach SQL at all; sqlstore's
// TestMappingRefusesHostileNames shows that a mapping's names and values
// must be plain identifiers and constants.
func TestSQLStoreBuildsNoSQLFromCallerData(t *testing.T) {
	reviewed := map[string]string{
		`"schema/" + string(d) + ".sql"`: "an embedded file name; an unknown dialect is an error",
		`"$" + strconv.Itoa(n)`:          "a placeholder number",
		`"WITH o AS (" + order.sql + ") " + shiftParams(claims.sql, len(order.slots))`: "placeOneStmt: two statements the store built (insertOrder, claimsInsert), placeholders renumbered",
		`"TimeType(" + strconv.Itoa(int(t)) + ")"`:                                     "a String method, never SQL",
		`"'" + x + "'"`:                    "literal: x matched ^[A-Za-z0-9_.-]{1,64}$ just before",
		"\"`\" + name + \"`\"":             "quoteIdent: name matched ^[A-Za-z_][A-Za-z0-9_]{0,63}$ (ident)",
		"`\"` + name + `\"`":               "quoteIdent: as above",
		`"(" + now + " - " + amount + ")"`: "nowAs: a clock expression minus a number of the mapping's window",
		`"strftime('%Y-%m-%d %H:%M:%f', 'now', '-" + sec + " seconds')"`: "nowAs: sec is strconv of the window",
		`"(" + col + " * 1000)"`:                                                      "asMS: col is a quoted mapped column",
		`"(CAST(" + col + " AS BIGINT) * 1000)"`:                                      "asMS on PostgreSQL: col is a quoted mapped column",
		`"CAST(FLOOR(UNIX_TIMESTAMP(" + col + ") * 1000) AS SIGNED)"`:                 "asMS: as above",
		`"(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + col + ") DIV 1000)"`: "asMS: as above",
		`"CAST(FLOOR(EXTRACT(EPOCH FROM " + col + ") * 1000) AS BIGINT)"`:             "asMS: as above",
		`"CAST(ROUND((julianday(" + col + ") - 2440587.5) * 86400000) AS INTEGER)"`:   "asMS: as above",
		`"(" + e + " + " + strconv.FormatInt(add.Milliseconds(), 10) + ")"`:           "asMS: an expression above plus the window's milliseconds",
		`"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + col + ")"`:            "keyOf: col is a quoted mapped column",
		`"CAST(EXTRACT(EPOCH FROM " + col + ") * 1000000 AS BIGINT)"`:                 "keyOf: as above",
		`"INTERVAL " + us + " MICROSECOND"`:                                           "nowAs: us is strconv of the window",
		`"INTERVAL '" + us + " microseconds'"`:                                        "nowAs: as above",
		`what + " condition on " + c.Column`:                                          "an error message of resolve, never SQL",
		`what + " condition column"`:                                                  "an error message of resolve, never SQL",
		`what + " fill column"`:                                                       "an error message of resolve (a Fill column's name), never SQL",
		`what + " fill of " + c.Column`:                                               "an error message of resolve (a Fill value's), never SQL",
		`"cancelled status for " + string(reason)`:                                    "an error message of resolve, never SQL",
		`"(SELECT " + now + ")"`:                                                      "due: a clock expression of nowAs",
		`"SELECT " + r.no + ", " + asText(d, r.status) + ", " + age + ", " + r.show + ", " + r.ownLock("") + ", " + r.ownSeats() + " FROM " + r.o + " WHERE " + r.no + " IN ("`: "the Statuses query's head: quoted mapped names, the age below, ownLock and ownSeats (literal columns or NULL)",
		`prefix + "lock_id"`: "ownLock: a table alias (\"\" or \"o.\" at every call) and the library's own column",
		`"SELECT order_no, lock_id, seats FROM oe_order_side WHERE scope = ? AND order_no IN (?" + strings.Repeat(", ?", len(nos)-1) + ")"`: "sideRows: placeholders only",
		`"(" + nowMS[d] + " - " + asMS(d, r.updatedType, r.updated, 0) + ")"`:                                                               "the Statuses age: the clock constant minus asMS of the quoted updated-at column",
		`")" + b.b.String()`: "the Statuses query's tail: the conditions built by the builder",
		`s.q.statusesPre + ph + strings.Repeat(", "+ph, len(chunk)-1) + s.q.statusesPost`: "the IN list: placeholders only (ph is \"?\" or numArg's cast of it), between the two parts above",
		`"CAST(" + col + " AS TEXT)"`:           "asText, settingNumber: col is a quoted mapped column (r.status, r.payment, \"o.\"+r.status, r.windowCol)",
		`"CAST(" + col + " AS CHAR)"`:           "settingNumber: col is the quoted window setting column",
		`" with " + strings.Join(valued, ", ")`: "checkLiveClaimKey: text of Check's message, never SQL",
		`"CAST(" + ph + " AS BIGINT)"`:          "numArg: ph is the placeholder \"?\"",
		`"(CASE WHEN " + text + " ~ '^[0-9]{1,18}$' THEN CAST(" + text + " AS BIGINT) END)"`:                                              "settingNumber: text is the cast of the quoted setting column above",
		`"(CASE WHEN length(" + text + ") BETWEEN 1 AND 18 AND " + text + " NOT GLOB '*[^0-9]*' THEN CAST(" + text + " AS INTEGER) END)"`: "settingNumber, SQLite: as above",
		`"(CASE WHEN " + text + " REGEXP '^[0-9]{1,18}$' THEN CAST(" + text + " AS SIGNED) END)"`:                                         "settingNumber, MySQL: as above",
		`"ALTER TABLE oe_payment_discrepancy DROP CONSTRAINT " + q + ", ADD PRIMARY KEY (scope, payment_id)"`:                             "upgradeDiscrepancyKey: q is the catalog's constraint name, validated and quoted by ident",
		`"INSERT INTO oe_payment_discrepancy_rekeyed (" + cols + ") SELECT " + cols + " FROM oe_payment_discrepancy"`:                     "rebuildDiscrepancySQLite: cols is a constant list of the library's columns",
		`last + "|" + no`: "the Expired cursor returned to the caller, never SQL text (it goes back in as arguments)",
		`strconv.FormatInt(expireAt.UnixMilli(), 10) + "|" + no`:                                 "the Expired cursor of the library's schema, for the tests and memstore",
		`strconv.Itoa(len(show)) + "|" + show + "|" + seat`:                                      "the Claims cursor returned to the caller, never SQL text (it goes back in as arguments)",
		`c.name + "=" + c.v.sql`:                                                                 "a part of the store's Scope: a name for seat-store keys, never SQL",
		`o.Table + "?" + strings.Join(parts, "&")`:                                               "the store's Scope: a name for seat-store keys, never SQL",
		`"(" + asMS(r.d, r.created.Type, alias+r.created.Column, 0) + " + " + r.windowSQL + ")"`: "expireMS: asMS of the quoted creation column plus the window setting's subquery (windowSQL)",
		`c.name + " = " + c.v.sql`:                                                               "checkWindow: a Check message naming a condition, never SQL",
	}
	// The builder's arguments that are not string literals.
	builderArgs := map[string]string{
		"col": "a quoted mapped column (the callers pass r.… fields or \"alias.\"+field), or a literal column of oe_order_side (side)", "extra": "a quoted mapped column or \"\"",
		"alias": "\"\", \"o.\", \"s.\" or \"c.\" at every call", "now": "a clock expression of nowAs", "seat": "\"NULL\" or \"rel.seat\"",
		"pre": "the text around a placeholder of keyArg, or \"\" and \"CAST(\" (inNos)", "post": "as pre; \"\" and \" AS BINARY)\" in inNos", "a": "a quoted mapped column", "c": "a quoted mapped column",
		"payment": "\"NULL\" or a quoted mapped column", "x": "keyArg's SQL",
		"expr":   "a quoted mapped column after \"o.\", or r.expireMS(\"o.\")",
		"prefix": "a table alias: \"\" or \"o.\" at every call of lock",
		"unit":   "resolveWindow: strconv of the window setting's unit in milliseconds",
	}
	// stable rewrites a clock expression of nowAs or nowMS; the others build
	// expressions of a quoted column and numbers of the mapping.
	// asText, numArg and settingNumber wrap a quoted mapped column (or the
	// placeholder "?") in a cast of constant text.
	builderCalls := map[string]bool{"nowAs": true, "asMS": true, "keyOf": true, "keyArg": true, "r.expireMS": true, "stable": true, "r.ownLock": true, "asText": true, "numArg": true, "settingNumber": true}
	dir := filepath.Join("..", "..", "cancel", "sqlstore")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	fset := token.NewFileSet()
	render := func(n ast.Node) string {
		var b strings.Builder
		require.NoError(t, printer.Fprint(&b, fset, n))
		return b.String()
	}
	seen := map[string]bool{}
	read := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		read++
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "fmt" && (strings.HasPrefix(sel.Sel.Name, "Sprint") || strings.HasPrefix(sel.Sel.Name, "Append") || sel.Sel.Name == "Fprintf") {
					t.Errorf("%s: formats a string with fmt.%s: review it for SQL built from caller data", fset.Position(n.Pos()), sel.Sel.Name)
				}
				if sel.Sel.Name != "w" {
					return true
				}
				for _, arg := range n.Args {
					switch a := arg.(type) {
					case *ast.BasicLit:
						continue
					case *ast.Ident:
						if _, ok := builderArgs[a.Name]; ok {
							continue
						}
					case *ast.SelectorExpr: // r.field, c.col, c.v.sql, r.cLocked.sql …
						// sc is r.scanCol(), a Time of the resolved mapping;
						// l is exactLit's lit, one of the mapping's constants.
						if root := render(a); strings.HasPrefix(root, "r.") || strings.HasPrefix(root, "c.") || root == "sc.Column" || root == "l.sql" {
							continue
						}
					case *ast.IndexExpr: // nowMS[d], intCast[r.d], div1000[r.d]: constants per dialect
						if x := render(a.X); x == "nowMS" || x == "intCast" || x == "div1000" {
							continue
						}
					case *ast.CallExpr:
						if builderCalls[render(a.Fun)] {
							continue
						}
					case *ast.BinaryExpr: // "c." + r.cNo: checked as a concatenation below
						if src := render(a); strings.HasPrefix(src, `"c." + r.`) || strings.HasPrefix(src, `"s." + r.`) || strings.HasPrefix(src, `"o." + r.`) {
							continue
						}
					}
					t.Errorf("%s: unreviewed argument %s of the statement builder: make sure it holds only validated names and constants, then add it to the list", fset.Position(arg.Pos()), render(arg))
				}
			case *ast.AssignStmt: // q += …: only string literals may be appended
				if n.Tok != token.ADD_ASSIGN {
					return true
				}
				for _, rhs := range n.Rhs {
					if lit, ok := rhs.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						continue
					}
					if src := render(rhs); isNumeric(src) {
						continue
					}
					t.Errorf("%s: unreviewed append %s: make sure no caller data can reach SQL through it, then allow it here", fset.Position(n.Pos()), render(n))
				}
			case *ast.BinaryExpr:
				if n.Op != token.ADD {
					return true
				}
				src := render(n)
				if _, ok := reviewed[src]; ok {
					seen[src] = true
					return false // a chain is one expression
				}
				if strings.HasPrefix(src, `"c." + r.`) || strings.HasPrefix(src, `"s." + r.`) || strings.HasPrefix(src, `"o." + r.`) || strings.HasPrefix(src, "alias + ") {
					return false // an alias and a quoted mapped column
				}
				if isNumeric(src) {
					return false
				}
				t.Errorf("%s: unreviewed concatenation %s: make sure no caller data can reach SQL through it, then add it to the list", fset.Position(n.Pos()), src)
				return false
			}
			return true
		})
	}
	require.Greater(t, read, 4, "the package's files were found")
	for src := range reviewed {
		if !seen[src] {
			t.Logf("reviewed concatenation no longer in sqlstore (drop it from the list): %s", src)
		}
	}
}

// isNumeric reports an addition of numbers (an index, a count), not text.
func isNumeric(src string) bool {
	return !strings.ContainsAny(src, `"`+"`")
}
