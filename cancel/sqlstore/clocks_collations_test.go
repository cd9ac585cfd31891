package sqlstore_test

// Probe classes held back from the authors, written by an adversarial reviewer:
//
//   - I4 (never cancelled before its deadline by the database's clock) and
//     liveness (a due order is found by Expired, counted by Overdue and
//     ended by a due-guarded cancel) under every time-zone rule a database
//     session may have, and when the database's clock steps, backwards too;
//   - I10 (byte-exact) for every comparison the library makes, not only
//     ids: statuses, claim states, Where values, payment ids, padded CHAR
//     order numbers.
//
// Every probe is judged by outcomes (was an order ended early, did a due
// order end, was a host's row that differs only by case or trailing space
// taken for the library's), never by re-deriving the store's rules.
// TestProbeFixed… tests showed a hole (committed failing, 77b53bc) and
// pass since its fix (eae719d: constants compared as bytes; then ids read
// back unpadded);
// TestProbeHolds… tests show a probe that held.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// ---------------------------------------------------------------------------
// Sessions with a time zone of their own.

// mysqlSession opens the database db is connected to again, every
// connection of the new pool in session time zone tz (go-sql-driver's DSN
// parameter, a SET on each new connection).
func mysqlSession(t *testing.T, db *sql.DB, tz string) *sql.DB {
	t.Helper()
	var name string
	require.NoError(t, db.QueryRow("SELECT DATABASE()").Scan(&name))
	cfg, err := mysql.ParseDSN(os.Getenv(testenv.EnvMySQL))
	require.NoError(t, err)
	cfg.DBName = name
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	if tz != "" {
		cfg.Params["time_zone"] = "'" + tz + "'"
	}
	out, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	out.SetMaxOpenConns(4)
	t.Cleanup(func() { out.Close() })
	var got string
	require.NoError(t, out.QueryRow("SELECT @@session.time_zone").Scan(&got))
	if tz != "" {
		require.Equal(t, tz, got, "the session's zone")
	}
	return out
}

// pgSession is the same for PostgreSQL: pgx sends timezone as a run-time
// parameter of each connection.
func pgSession(t *testing.T, db *sql.DB, tz string) *sql.DB {
	t.Helper()
	var schema string
	require.NoError(t, db.QueryRow("SELECT current_schema()").Scan(&schema))
	u, err := url.Parse(os.Getenv(testenv.EnvPostgres))
	require.NoError(t, err, "the probes take the URL form of the PostgreSQL DSN")
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("timezone", tz)
	u.RawQuery = q.Encode()
	out, err := sql.Open("pgx", u.String())
	require.NoError(t, err)
	out.SetMaxOpenConns(4)
	t.Cleanup(func() { out.Close() })
	var got string
	require.NoError(t, out.QueryRow("SHOW TIME ZONE").Scan(&got))
	require.Equal(t, tz, got, "the session's zone")
	return out
}

// zoneCase is one schema on one dialect, its tables made once.
type zoneCase struct {
	name    string
	mapping *sqlstore.Mapping // nil: the library's own schema
	ddl     func(d sqlstore.Dialect) []string
	res     time.Duration // the deadline column's resolution
}

var zoneCases = []zoneCase{
	{name: "default", res: time.Millisecond},
	{name: "seatflow-DateTimeUTC", mapping: &seatflow.mapping, ddl: seatflow.ddl, res: time.Second},
	{name: "instant-Timestamp", mapping: &instant.mapping, ddl: instant.ddl, res: time.Second},
}

func newStoreOn(t *testing.T, db *sql.DB, d sqlstore.Dialect, zc zoneCase) *sqlstore.Store {
	t.Helper()
	var s *sqlstore.Store
	var err error
	if zc.mapping == nil {
		s, err = sqlstore.New(db, d)
	} else {
		s, err = sqlstore.New(db, d, *zc.mapping)
	}
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// allExpired pages through Expired one order at a time (every page a
// keyset step, the cursor converted back by the database in its session).
func allExpired(t *testing.T, s *sqlstore.Store) map[string]int {
	t.Helper()
	ctx := context.Background()
	seen := map[string]int{}
	cursor := ""
	for i := 0; i < 1000; i++ {
		nos, next, err := s.Expired(ctx, cursor, 1)
		require.NoError(t, err)
		for _, no := range nos {
			seen[no]++
		}
		if next == "" {
			return seen
		}
		cursor = next
	}
	t.Fatal("Expired does not end")
	return nil
}

// zoneProbe places, through a session in zone placeTZ, orders due at the
// given instants (some past, some future, DST transitions among them), and
// judges through a session in zone judgeTZ: no order ends before its
// deadline by the database's clock, every due one is found by Expired
// (paged one by one), counted by Overdue and ended by a due-guarded cancel.
func zoneProbe(t *testing.T, d sqlstore.Dialect, zc zoneCase, base *sql.DB, open func(*testing.T, *sql.DB, string) *sql.DB, placeTZ, judgeTZ string, instants []time.Time) {
	ctx := context.Background()
	pdb, jdb := open(t, base, placeTZ), open(t, base, judgeTZ)
	ps, js := newStoreOn(t, pdb, d, zc), newStoreOn(t, jdb, d, zc)

	now, err := js.Now(ctx)
	require.NoError(t, err)
	// Two orders a few seconds ahead: the early-cancel bait, and later the
	// liveness check.
	soon := now.Add(1200 * time.Millisecond)
	deadlines := map[string]time.Time{"z-soon": soon}
	for i, at := range instants {
		deadlines[fmt.Sprintf("z-%02d", i)] = at
	}
	for no, at := range deadlines {
		tx, err := pdb.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, ps.Place(ctx, tx, cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "sh1", Seats: []string{"S" + no}, ExpireAt: at}), no)
		require.NoError(t, tx.Commit())
	}

	// The deadline each session reads back is never earlier than the one
	// placed (an earlier stored deadline is an early cancel), and later by
	// less than the column's resolution.
	for no, at := range deadlines {
		for _, s := range []*sqlstore.Store{ps, js} {
			o, err := s.Order(ctx, no)
			require.NoError(t, err, no)
			require.False(t, o.ExpireAt.Before(at.Truncate(time.Millisecond)), "%s placed due %s (%s) reads %s: earlier (I4)", no, at.UTC().Format(time.RFC3339Nano), placeTZ, o.ExpireAt.UTC().Format(time.RFC3339Nano))
			require.Less(t, o.ExpireAt.Sub(at), zc.res, "%s placed due %s reads %s", no, at.UTC(), o.ExpireAt.UTC())
		}
	}

	// Judge by the database's clock, now.
	dbNow, err := js.Now(ctx)
	require.NoError(t, err)
	due := map[string]bool{}
	for no, at := range deadlines {
		due[no] = !at.After(dbNow.Add(-zc.res)) // clearly due, whatever the rounding up
	}
	found := allExpired(t, js)
	n, _, err := js.Overdue(ctx)
	require.NoError(t, err)
	nDue := 0
	for no, at := range deadlines {
		notYet := at.After(dbNow.Add(time.Second)) // clearly not due yet
		if due[no] {
			nDue++
			require.Equal(t, 1, found[no], "%s due %s (db now %s, session %s) is not listed once by Expired", no, at.UTC(), dbNow.UTC(), judgeTZ)
		}
		if notYet {
			require.Zero(t, found[no], "%s due %s is listed by Expired at db now %s (session %s): early", no, at.UTC(), dbNow.UTC(), judgeTZ)
			res, err := js.CancelPending(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
			require.NoError(t, err)
			require.False(t, res.Changed, "%s due %s cancelled by a due guard at db now %s (session %s): early (I4)", no, at.UTC(), dbNow.UTC(), judgeTZ)
		}
	}
	require.GreaterOrEqual(t, n, nDue, "Overdue counts every due order")
	for no := range deadlines {
		if !due[no] {
			continue
		}
		res, err := js.CancelPending(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		require.True(t, res.Changed, "%s due %s not cancelled by a due guard at db now %s (session %s)", no, deadlines[no].UTC(), dbNow.UTC(), judgeTZ)
	}

	// Liveness of the soon one: once due by the database's clock, it is
	// found, counted and cancelled.
	for {
		now, err := js.Now(ctx)
		require.NoError(t, err)
		if now.After(soon.Add(zc.res)) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.Equal(t, 1, allExpired(t, js)["z-soon"], "z-soon once due is listed")
	n, _, err = js.Overdue(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1)
	res, err := js.CancelPending(ctx, cancel.Request{OrderNo: "z-soon", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
	require.NoError(t, err)
	require.True(t, res.Changed, "z-soon once due is cancelled")
}

// transitions returns instants around the zone's clock changes, the two
// before now and the two after (found by Go's zone data), each -1 ms, at,
// +1 ms and +30 min.
func transitions(t *testing.T, zone string, now time.Time) []time.Time {
	loc, err := time.LoadLocation(zone)
	require.NoError(t, err)
	var out []time.Time
	add := func(at time.Time) {
		out = append(out, at.Add(-time.Millisecond), at, at.Add(time.Millisecond), at.Add(30*time.Minute))
	}
	// Step by hours across ±400 days, a change is where the offset changes.
	var found []time.Time
	prev := now.Add(-400 * 24 * time.Hour)
	_, po := prev.In(loc).Zone()
	for at := prev.Add(time.Hour); at.Before(now.Add(400 * 24 * time.Hour)); at = at.Add(time.Hour) {
		_, o := at.In(loc).Zone()
		if o != po {
			// Narrow to the second.
			lo, hi := at.Add(-time.Hour), at
			for hi.Sub(lo) > time.Second {
				mid := lo.Add(hi.Sub(lo) / 2)
				if _, mo := mid.In(loc).Zone(); mo == po {
					lo = mid
				} else {
					hi = mid
				}
			}
			found = append(found, hi.Truncate(time.Second))
			po = o
		}
	}
	for _, at := range found {
		add(at)
	}
	return out
}

// TestProbeHoldsSessionTimeZonesPostgres: sessions in Kiritimati (+14),
// St John's (-3:30/-2:30), Lord Howe (+10:30/+11, a half-hour DST) and
// UTC, placing in one zone and judging in another, with deadlines at each
// zone's DST changes of the last and next 400 days: the library's schema,
// SeatFlow's with timestamp (UTC) deadlines and with timestamptz ones.
func TestProbeHoldsSessionTimeZonesPostgres(t *testing.T) {
	zones := []string{"Pacific/Kiritimati", "America/St_Johns", "Australia/Lord_Howe", "UTC"}
	for _, zc := range zoneCases {
		t.Run(zc.name, func(t *testing.T) {
			t.Parallel()
			base := testenv.Postgres(t)
			if zc.mapping == nil {
				s, err := sqlstore.New(base, sqlstore.Postgres)
				require.NoError(t, err)
				require.NoError(t, s.Migrate(context.Background()))
				s.Close()
			} else {
				hostStore(t, base, sqlstore.Postgres, hostSchema{mapping: *zc.mapping, ddl: zc.ddl})
			}
			now := time.Now()
			var instants []time.Time
			for _, z := range zones[:3] {
				instants = append(instants, transitions(t, z, now)...)
			}
			require.NotEmpty(t, instants)
			// Place in one zone, judge in the next (two rounds: each
			// order number once per store, so a second database).
			zoneProbe(t, sqlstore.Postgres, zc, base, pgSession, zones[0], zones[1], instants)
			base2 := testenv.Postgres(t)
			if zc.mapping == nil {
				s, err := sqlstore.New(base2, sqlstore.Postgres)
				require.NoError(t, err)
				require.NoError(t, s.Migrate(context.Background()))
				s.Close()
			} else {
				hostStore(t, base2, sqlstore.Postgres, hostSchema{mapping: *zc.mapping, ddl: zc.ddl})
			}
			zoneProbe(t, sqlstore.Postgres, zc, base2, pgSession, zones[2], zones[3], instants)
		})
	}
}

// TestProbeHoldsSessionTimeZonesMariaDB: sessions at +13:00 and -12:59 (the
// extremes MariaDB accepts for a fixed offset: '+14:00' is refused with
// error 1298, so Kiritimati's +14 cannot be a MariaDB session's zone), and the server's SYSTEM zone, placing
// in one and judging in another (a pool whose hosts' DSNs differ); the library's schema, SeatFlow's DATETIME
// (UTC) deadlines and TIMESTAMP ones. A named zone with daylight saving
// needs the server's zone tables: when mysql.time_zone_name is empty (as on
// the test servers) it is logged and not probed.
func TestProbeHoldsSessionTimeZonesMariaDB(t *testing.T) {
	for _, zc := range zoneCases {
		t.Run(zc.name, func(t *testing.T) {
			t.Parallel()
			mk := func() *sql.DB {
				base := testenv.MySQL(t)
				if zc.mapping == nil {
					s, err := sqlstore.New(base, sqlstore.MySQL)
					require.NoError(t, err)
					require.NoError(t, s.Migrate(context.Background()))
					s.Close()
				} else {
					hostStore(t, base, sqlstore.MySQL, hostSchema{mapping: *zc.mapping, ddl: zc.ddl})
				}
				return base
			}
			base := mk()
			var zones int
			require.NoError(t, base.QueryRow("SELECT COUNT(*) FROM mysql.time_zone_name").Scan(&zones))
			named := zones > 0
			if !named {
				t.Log("the server has no time zone tables (mysql.time_zone_name is empty): a named zone with daylight saving is not probed on MariaDB")
			}
			now := time.Now()
			instants := transitions(t, "America/St_Johns", now) // instants only: the session zones are fixed offsets
			instants = append(instants, now.Add(-14*time.Hour), now.Add(-12*time.Hour-time.Second), now.Add(13*time.Hour), now.Add(-time.Hour))
			zoneProbe(t, sqlstore.MySQL, zc, base, mysqlSession, "+13:00", "-12:59", instants)
			zoneProbe(t, sqlstore.MySQL, zc, mk(), mysqlSession, "-12:59", "", instants) // SYSTEM (UTC here) judges
			if named {
				zoneProbe(t, sqlstore.MySQL, zc, mk(), mysqlSession, "America/St_Johns", "Australia/Lord_Howe", instants)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// The database's clock steps (MariaDB: SET timestamp is the session's
// clock; NOW(), UTC_TIMESTAMP(6) and UNIX_TIMESTAMP() follow it, SYSDATE()
// does not). PostgreSQL has no per-session clock: not probed there.

// steppedDB is a one-connection pool, so that SET timestamp holds for every
// statement the store sends.
type steppedDB struct {
	t  *testing.T
	db *sql.DB
}

func newSteppedDB(t *testing.T) (*steppedDB, *sqlstore.Store) {
	base := testenv.MySQL(t)
	db := mysqlSession(t, base, "")
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	s, err := sqlstore.New(db, sqlstore.MySQL)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(context.Background()))
	return &steppedDB{t: t, db: db}, s
}

// at sets the database's clock to at (whole microseconds).
func (c *steppedDB) at(at time.Time) {
	c.t.Helper()
	_, err := c.db.Exec(fmt.Sprintf("SET timestamp = %d.%06d", at.Unix(), at.Nanosecond()/1000))
	require.NoError(c.t, err)
}

// TestProbeHoldsClockFollowsSetTimestamp: what the steps below rest on.
func TestProbeHoldsClockFollowsSetTimestamp(t *testing.T) {
	c, s := newSteppedDB(t)
	at := time.Unix(1_900_000_000, 123_456_000)
	c.at(at)
	now, err := s.Now(context.Background())
	require.NoError(t, err)
	require.Equal(t, at.UnixMilli(), now.UnixMilli(), "the store's clock is the session's")
	var sys float64
	require.NoError(t, c.db.QueryRow("SELECT UNIX_TIMESTAMP(SYSDATE(6))").Scan(&sys))
	require.Less(t, sys, float64(1_900_000_000-1000), "SYSDATE does not follow SET timestamp")
}

// TestProbeHoldsClockStepsBack: the database's clock steps back an hour and
// forward again. Outcomes: no order is cancelled, listed or counted before
// its deadline by the clock of that moment; a due order is cancelled once
// the clock passes it; an extension never moves a deadline past the
// placement plus the maximum hold (the placement's time being the
// database's clock when it was placed); a refund record's lease is never
// taken twice within a lease, and is taken again once the clock is a lease
// past the last try; Statuses' age is never negative.
func TestProbeHoldsClockStepsBack(t *testing.T) {
	ctx := context.Background()
	c, s := newSteppedDB(t)
	t0 := time.Now().Truncate(time.Second)
	c.at(t0)
	place := func(no string, at time.Time) {
		tx, err := c.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, s.Place(ctx, tx, cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "sh", Seats: []string{"A-" + no}, ExpireAt: at}))
		require.NoError(t, tx.Commit())
	}
	dueCancel := func(no string) bool {
		res, err := s.CancelPending(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		return res.Changed
	}
	place("c-30m", t0.Add(30*time.Minute))
	place("c-due", t0.Add(-time.Second)) // due at t0
	place("c-hold", t0.Add(15*time.Minute))
	_, err := s.RecordDiscrepancy(ctx, cancel.Discrepancy{PaymentID: "pay-1", OrderNo: "c-due", UserID: "u1", Status: expiry.StatusCancelled})
	require.NoError(t, err)

	// Back an hour.
	c.at(t0.Add(-time.Hour))
	require.False(t, dueCancel("c-30m"), "not due by the database's clock")
	require.False(t, dueCancel("c-due"), "due at t0, the clock now says t0-1h: not due by it")
	require.Empty(t, allExpired(t, s), "nothing is due by the clock of this moment")
	n, _, err := s.Overdue(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	st, err := s.Statuses(ctx, []string{"c-30m"})
	require.NoError(t, err)
	require.Equal(t, cancel.AgeUnknown, st["c-30m"].Age, "written an hour ahead of the clock: its age is unknown, never negative (cancel.OrderAge)")
	r, err := s.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: "c-hold", In: 2 * time.Hour, MaxHold: 30 * time.Minute})
	require.NoError(t, err)
	require.False(t, r.Order.ExpireAt.After(t0.Add(30*time.Minute)), "extended to %s, past placement+hold %s", r.Order.ExpireAt, t0.Add(30*time.Minute))
	got, err := s.ClaimDiscrepancies(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.Empty(t, got, "recorded (tried) at t0: by the clock t0-1h not a lease ago")

	// Forward past every deadline.
	c.at(t0.Add(20 * time.Minute))
	r, err = s.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: "c-hold", In: 2 * time.Hour, MaxHold: 30 * time.Minute})
	require.NoError(t, err)
	require.False(t, r.Order.ExpireAt.After(t0.Add(30*time.Minute)), "extended to %s, past placement+hold", r.Order.ExpireAt)
	require.True(t, dueCancel("c-due"), "due by the clock now")
	got, err = s.ClaimDiscrepancies(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, got, 1, "a lease past the last try: claimed")

	// Back again: the lease just taken at t0+20m is not taken again.
	c.at(t0.Add(-2 * time.Hour))
	got, err = s.ClaimDiscrepancies(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.Empty(t, got, "taken at t0+20m: not again within its lease by any clock reading before t0+21m")
	r, err = s.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: "c-hold", In: 3 * time.Hour, MaxHold: 30 * time.Minute})
	require.NoError(t, err)
	require.False(t, r.Order.ExpireAt.After(t0.Add(30*time.Minute)), "extended to %s, past placement+hold", r.Order.ExpireAt)
	require.False(t, dueCancel("c-30m"))
	require.False(t, dueCancel("c-hold"))

	// Forward: everything due ends, the lease is claimable again.
	c.at(t0.Add(31 * time.Minute))
	require.Len(t, allExpired(t, s), 2)
	require.True(t, dueCancel("c-30m"))
	require.True(t, dueCancel("c-hold"))
	got, err = s.ClaimDiscrepancies(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, got, 1, "a lease past the last try: claimed again")
}

// TestProbeHoldsPlacedWhileClockBehind: an order placed while the
// database's clock is an hour behind, its deadline the host's (right)
// time plus 15 minutes; the clock is then right again. The maximum hold
// counts from the database's placement time, so an extension is capped
// earlier, never later, than by the real time.
func TestProbeHoldsPlacedWhileClockBehind(t *testing.T) {
	ctx := context.Background()
	c, s := newSteppedDB(t)
	t0 := time.Now().Truncate(time.Second)
	c.at(t0.Add(-time.Hour))
	tx, err := c.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, s.Place(ctx, tx, cancel.Placement{OrderNo: "b-1", UserID: "u1", ShowID: "sh", Seats: []string{"A1"}, ExpireAt: t0.Add(15 * time.Minute)}))
	require.NoError(t, tx.Commit())
	c.at(t0)
	r, err := s.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: "b-1", In: time.Hour, MaxHold: 30 * time.Minute})
	require.NoError(t, err)
	require.False(t, r.Order.ExpireAt.After(t0.Add(30*time.Minute)), "extended to %s, past the real placement+hold", r.Order.ExpireAt)
	res, err := s.CancelPending(ctx, cancel.Request{OrderNo: "b-1", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
	require.NoError(t, err)
	require.False(t, res.Changed, "not due")
}

// ---------------------------------------------------------------------------
// I10 beyond ids.

// rawExec runs a host's statement.
func rawExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	_, err := db.Exec(q, args...)
	require.NoError(t, err, q)
}

// shopState reads a shop_order row's state in brackets, so that a trailing
// space shows.
func shopState(t *testing.T, db *sql.DB) func(no string) string {
	return func(no string) string {
		var st string
		require.NoError(t, db.QueryRow("SELECT CONCAT('[', state, ']') FROM shop_order WHERE order_code = ?", no).Scan(&st))
		return st
	}
}

// TestProbeFixedStatusCaseFolds: shop's string statuses on MariaDB, its
// state column in the server's default utf8mb4_general_ci (case-insensitive,
// PAD SPACE), as a host's migration leaves it.
//
// Sequence: the host's own rows of tenant 7, due, with states 'new' and
// 'NEW ' (a case variant and a trailing-space variant of the mapping's
// pending 'NEW', which the host does not use for pending: a draft, a
// legacy import), and a ticket of a library order with state 'held'
// beside its real 'HELD' claim. Then Expired, Overdue, a due-guarded
// cancel, a payment, and a cancel of the library's order.
//
// Broken (I10, for statuses and claim states): the compare-and-sets and
// scans compare state = 'NEW' / 'HELD' in the column's collation, so the
// host's 'new' and 'NEW ' rows are listed as due, counted, cancelled
// (state rewritten to 'EXPIRED') or paid; the 'held' ticket is released
// with the order's claims and reported as one of its seats.
func TestProbeFixedStatusCaseFolds(t *testing.T) {
	ctx := context.Background()
	db := testenv.MySQL(t)
	s := hostStore(t, db, sqlstore.MySQL, shop)
	past := time.Now().Add(-time.Hour).Unix()
	rawExec(t, db, "INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at) VALUES (7, 'h-lower', 'u1', 'e1', 'new', ?), (7, 'h-pad', 'u1', 'e1', 'NEW ', ?), (7, 'h-pay', 'u1', 'e1', 'New', ?)", past, past, past)
	// The library's own order, due, so the probe is not vacuous.
	require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "lib-1", UserID: "u1", ShowID: "e1", Seats: []string{"A1"}, ExpireAt: time.Now().Add(-time.Minute)}))
	rawExec(t, db, "INSERT INTO shop_ticket (tenant_id, event_id, seat_code, order_code, status) VALUES (7, 'e1', 'Z9', 'lib-1', 'held')")

	state := shopState(t, db)
	var failures []string
	fail := func(f string, a ...any) { failures = append(failures, fmt.Sprintf(f, a...)) }

	found := allExpired(t, s)
	if found["lib-1"] != 1 {
		fail("the library's due order lib-1 is not listed")
	}
	for _, no := range []string{"h-lower", "h-pad", "h-pay"} {
		if found[no] > 0 {
			fail("Expired lists the host's %s (state %s) as a due pending order", no, state(no))
		}
	}
	if n, _, err := s.Overdue(ctx); err != nil || n != 1 {
		fail("Overdue counts %d (err %v), want 1 (lib-1 only)", n, err)
	}
	claims, _, err := s.Claims(ctx, "", 100)
	require.NoError(t, err)
	for _, c := range claims {
		if c.SeatID == "Z9" {
			fail("Claims reports the host's 'held' ticket Z9 as a live claim of %s", c.OrderNo)
		}
	}
	for _, no := range []string{"h-lower", "h-pad"} {
		before := state(no)
		res, err := s.CancelPending(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		if err == nil && res.Changed || state(no) != before {
			fail("a due-guarded cancel of the host's %s changed it: %s -> %s (changed %v, err %v)", no, before, state(no), res.Changed, err)
		}
	}
	before := state("h-pay")
	res, err := s.PayPending(ctx, cancel.Payment{OrderNo: "h-pay", PaymentID: "pay-h"})
	if err == nil && res.Changed || state("h-pay") != before {
		fail("a payment of the host's h-pay (state %s) changed it to %s (changed %v, err %v)", before, state("h-pay"), res.Changed, err)
	}
	res, err = s.CancelPending(ctx, cancel.Request{OrderNo: "lib-1", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
	require.NoError(t, err)
	require.True(t, res.Changed)
	for _, seat := range res.Seats {
		if seat == "Z9" {
			fail("the cancel of lib-1 took the host's 'held' ticket Z9 as one of its seats: %v", res.Seats)
		}
	}
	var z9 string
	require.NoError(t, db.QueryRow("SELECT status FROM shop_ticket WHERE seat_code = 'Z9'").Scan(&z9))
	if z9 != "held" {
		fail("the host's ticket Z9 'held' was rewritten to %q", z9)
	}
	require.Empty(t, failures, "I10: a status differing only by case or trailing space was taken for the mapping's:\n%s", strings.Join(failures, "\n"))
}

// TestProbeFixedLateStatusCaseFolds: the late transitions on shop's
// string statuses on MariaDB (utf8mb4_general_ci: case-insensitive, PAD
// SPACE), as TestProbeFixedStatusCaseFolds for the others.
//
// Sequence: a library order 'h-exp' that the host closed in its own way,
// state 'expired' (not the mapping's timeout status 'EXPIRED') and its
// ticket freed, paid late; a library
// order whose state the host set to 'new' (its draft, not the mapping's
// pending 'NEW'), due within the lead, warned; the same kind of row given
// a later deadline through the deadline statement itself (SetDeadline reads
// the order first, so the statement is run as the race would run it).
//
// Broken (I10): the reinstatement's, the warning's and the deadline's
// compare-and-sets compared the state in the column's collation: the late
// payment made 'h-exp' PAID, the warning fired for 'new', the deadline moved.
func TestProbeFixedLateStatusCaseFolds(t *testing.T) {
	ctx := context.Background()
	db := testenv.MySQL(t)
	s := hostStore(t, db, sqlstore.MySQL, shop)
	state := shopState(t, db)
	var failures []string
	fail := func(f string, a ...any) { failures = append(failures, fmt.Sprintf(f, a...)) }

	require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "h-exp", UserID: "u1", ShowID: "e1", Seats: []string{"R1"}, ExpireAt: time.Now().Add(-time.Minute)}))
	rawExec(t, db, "UPDATE shop_order SET state = 'expired', close_reason = 'timeout' WHERE order_code = 'h-exp'")
	rawExec(t, db, "UPDATE shop_ticket SET status = 'FREE' WHERE order_code = 'h-exp'")
	claimed := 0
	res, err := s.ReinstateCancelled(ctx, cancel.Payment{OrderNo: "h-exp", UserID: "u1", PaymentID: "pay-late"}, func(context.Context, cancel.Hold, int) (string, error) {
		claimed++
		return "lock-1", nil
	})
	if res.Changed || state("h-exp") != "[expired]" || claimed > 0 {
		fail("a late payment of the host's h-exp (state 'expired') reinstated it: state %s, changed %v, seats claimed %d, err %v", state("h-exp"), res.Changed, claimed, err)
	}

	require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "lib-w", UserID: "u1", ShowID: "e1", Seats: []string{"W1"}, ExpireAt: time.Now().Add(30 * time.Second)}))
	rawExec(t, db, "UPDATE shop_order SET state = 'new' WHERE order_code = 'lib-w'")
	w, err := s.MarkWarned(ctx, "lib-w", time.Minute)
	var warnedAt sql.NullInt64
	require.NoError(t, db.QueryRow("SELECT warned_at_ms FROM oe_order_side WHERE order_no = 'lib-w'").Scan(&warnedAt))
	if w.Fired || warnedAt.Valid {
		fail("the warning of lib-w (state 'new', due within the lead) fired or was marked: fired %v, warned_at_ms %v, err %v", w.Fired, warnedAt, err)
	}

	require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "lib-d", UserID: "u1", ShowID: "e1", Seats: []string{"D1"}, ExpireAt: time.Now().Add(time.Minute)}))
	o, err := s.Order(ctx, "lib-d")
	require.NoError(t, err)
	rawExec(t, db, "UPDATE shop_order SET state = 'new' WHERE order_code = 'lib-d'")
	target := o.ExpireAt.Add(time.Hour).Unix()
	r, err := db.ExecContext(ctx, sqlstore.ExtendSQL(s), sqlstore.ExtendArgs(s, "lib-d", target, o.ExpireAt.UnixMilli(), target*1000)...)
	require.NoError(t, err)
	if n, _ := r.RowsAffected(); n != 0 {
		fail("the deadline of lib-d (state 'new') moved: %d row", n)
	}
	require.Empty(t, failures, "I10: a status differing only by case was taken for the mapping's:\n%s", strings.Join(failures, "\n"))
}

// tenantShop is shop with a string tenant: Where tenant = 'acme' on a
// VARCHAR column in the server's default collation (MariaDB:
// utf8mb4_general_ci).
func tenantShop(tenant string) hostSchema {
	m := shop.mapping
	m.Orders.Where = []sqlstore.Condition{{Column: "tenant", Value: tenant}}
	cl := *m.Claims
	cl.Where = []sqlstore.Condition{{Column: "tenant", Value: tenant}}
	m.Claims = &cl
	return hostSchema{name: "tenant-" + tenant, mapping: m, ddl: func(d sqlstore.Dialect) []string {
		return []string{
			`CREATE TABLE shop_order (
				tenant       VARCHAR(16) NOT NULL,
				order_code   VARCHAR(64) NOT NULL,
				buyer        VARCHAR(64) NOT NULL,
				event_id     VARCHAR(64) NOT NULL,
				state        VARCHAR(16) NOT NULL,
				due_at       BIGINT      NOT NULL,
				modified_at  BIGINT      NULL,
				payment_ref  VARCHAR(64) NULL,
				close_reason VARCHAR(16) NULL,
				PRIMARY KEY (tenant, order_code)
			)`,
			"CREATE INDEX shop_order_due ON shop_order (tenant, state, due_at, order_code)",
			`CREATE TABLE shop_ticket (
				id BIGINT AUTO_INCREMENT PRIMARY KEY,
				tenant     VARCHAR(16) NOT NULL,
				event_id   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
				seat_code  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
				order_code VARCHAR(64) NOT NULL,
				status     VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
				live       TINYINT AS (IF(status = 'FREE', NULL, 1)) STORED,
				UNIQUE KEY shop_ticket_live (tenant, event_id, seat_code, live),
				KEY shop_ticket_order (tenant, order_code)
			)`,
		}
	}}
}

// TestProbeFixedWhereValueCaseFolds: two tenants' stores on one MariaDB
// database, Where tenant = 'acme' and tenant = 'ACME' (a tenant key is an
// id the host chose; the library compares it), and a host's row of tenant
// 'acme ' (trailing space), on the server's default collation.
//
// Sequence: ACME places order A-1 (due) with seat s1; a host row of tenant
// 'acme ' x-1 is due and pending. Through acme's store: Expired, Overdue,
// Order, Statuses, Claims, a due-guarded cancel of A-1 and of x-1.
//
// Broken (I10 on Where values, and so I16, scope by construction): the
// condition tenant = 'acme' is compared in the column's collation, so
// acme's store lists ACME's and 'acme ”s orders as its own, reads them,
// cancels them and releases their claims.
func TestProbeFixedWhereValueCaseFolds(t *testing.T) {
	ctx := context.Background()
	db := testenv.MySQL(t)
	upper := hostStore(t, db, sqlstore.MySQL, tenantShop("ACME"))
	lower, err := sqlstore.New(db, sqlstore.MySQL, tenantShop("acme").mapping)
	require.NoError(t, err)
	t.Cleanup(func() { lower.Close() })
	require.NoError(t, lower.Check(ctx))

	require.NoError(t, placeTx(t, db, upper, cancel.Placement{OrderNo: "A-1", UserID: "u1", ShowID: "e1", Seats: []string{"s1"}, ExpireAt: time.Now().Add(-time.Minute)}))
	rawExec(t, db, "INSERT INTO shop_order (tenant, order_code, buyer, event_id, state, due_at) VALUES ('acme ', 'x-1', 'u2', 'e1', 'NEW', ?)", time.Now().Add(-time.Hour).Unix())

	var failures []string
	fail := func(f string, a ...any) { failures = append(failures, fmt.Sprintf(f, a...)) }
	found := allExpired(t, lower)
	for no := range found {
		fail("acme's Expired lists %s, another tenant's", no)
	}
	if n, _, err := lower.Overdue(ctx); err != nil || n != 0 {
		fail("acme's Overdue counts %d (err %v), want 0", n, err)
	}
	if _, err := lower.Order(ctx, "A-1"); !errors.Is(err, expiry.ErrNotFound) {
		fail("acme's Order(A-1) reads ACME's order (err %v)", err)
	}
	st, err := lower.Statuses(ctx, []string{"A-1", "x-1"})
	require.NoError(t, err)
	for no := range st {
		fail("acme's Statuses answers for %s, another tenant's", no)
	}
	claims, _, err := lower.Claims(ctx, "", 100)
	require.NoError(t, err)
	for _, c := range claims {
		fail("acme's Claims lists %s/%s of %s, another tenant's", c.ShowID, c.SeatID, c.OrderNo)
	}
	for _, no := range []string{"A-1", "x-1"} {
		res, err := lower.CancelPending(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		if err == nil && res.Changed {
			fail("acme's due-guarded cancel cancelled %s, another tenant's (seats %v)", no, res.Seats)
		}
	}
	var state string
	require.NoError(t, db.QueryRow("SELECT state FROM shop_order WHERE BINARY tenant = 'ACME' AND order_code = 'A-1'").Scan(&state))
	if state != "NEW" {
		fail("ACME's A-1 is %s after acme's calls", state)
	}
	require.Empty(t, failures, "I10/I16: a Where value differing only by case or trailing space was taken for the store's:\n%s", strings.Join(failures, "\n"))
}

// TestProbeHoldsPaymentIDsExact: on SeatFlow's tables (utf8mb4_general_ci
// pay_no) a payment 'P1' and its repeat 'p1' are two payments: the repeat
// reports the payment that paid ('P1'), and their refund records are two.
func TestProbeHoldsPaymentIDsExact(t *testing.T) {
	ctx := context.Background()
	for _, d := range []sqlstore.Dialect{sqlstore.MySQL, sqlstore.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			db := openDB(t, d)
			s := hostStore(t, db, d, seatflow)
			require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "o-1", UserID: "u1", ShowID: "sh", Seats: []string{"A1"}, ExpireAt: time.Now().Add(time.Hour)}))
			res, err := s.PayPending(ctx, cancel.Payment{OrderNo: "o-1", PaymentID: "P1"})
			require.NoError(t, err)
			require.True(t, res.Changed)
			res, err = s.PayPending(ctx, cancel.Payment{OrderNo: "o-1", PaymentID: "p1"})
			require.False(t, res.Changed)
			if err == nil {
				require.Equal(t, "P1", res.PaymentID, "the repeat p1 is told the payment that paid")
			}
			for _, id := range []string{"R1", "r1"} {
				rec, err := s.RecordDiscrepancy(ctx, cancel.Discrepancy{PaymentID: id, OrderNo: "o-1", UserID: "u1", Status: expiry.StatusPaid})
				require.NoError(t, err)
				require.True(t, rec, "%s is a payment of its own", id)
			}
			require.NoError(t, s.SettleDiscrepancy(ctx, "R1"))
			got, err := s.ClaimDiscrepancies(ctx, 0, 10)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, "r1", got[0].PaymentID, "settling R1 does not settle r1")
		})
	}
}

// charNo is SeatFlow's schema with CHAR(12) order numbers on both tables
// (a fixed-width code, as public order tables have).
// PostgreSQL's character(n) keeps the padding in what it returns; MariaDB
// strips it.
var charNo = hostSchema{
	name:    "charno",
	mapping: seatflow.mapping,
	ddl: func(d sqlstore.Dialect) []string {
		var out []string
		for _, q := range seatflow.ddl(d) {
			out = append(out, strings.ReplaceAll(q, "order_no      VARCHAR(64)", "order_no      CHAR(12)"))
		}
		out[3] = strings.Replace(out[3], "order_no VARCHAR(64)", "order_no CHAR(12)", 1)
		return out
	},
}

// TestProbeFixedCharOrderNumbersPostgres: SeatFlow's tables with CHAR(12)
// order numbers, which Check accepts as a string column.
//
// Sequence: Place o-1 (due) with seat A1; the reconciler's calls: Expired,
// then a due-guarded cancel of each number it returned; Statuses of o-1;
// Claims.
//
// Broken on PostgreSQL (I10, and I2/I15 through the reconciler): the
// numbers the store reads back are character(n)'s padded text, "o-1" plus
// nine spaces. Statuses(["o-1"]) answers nothing for a live order (the
// row's number is not byte-equal to the one asked, so it is dropped), and
// a lock pass takes a live order for missing and frees its seats after the
// grace; Claims names each claim's order "o-1         ", which is no valid
// order number (expiry.ValidateID refuses spaces), so a rebuild locks the
// seats under a number no cancel or payment will ever release. (Expired's
// numbers are padded too, but a cancel of the padded number still matches,
// bpchar comparison ignoring trailing spaces, so the due order ends.)
func TestProbeFixedCharOrderNumbersPostgres(t *testing.T) {
	charOrderNumbers(t, sqlstore.Postgres)
}

// TestProbeHoldsCharOrderNumbersMariaDB: the same on MariaDB, which strips
// CHAR padding when it reads.
func TestProbeHoldsCharOrderNumbersMariaDB(t *testing.T) {
	charOrderNumbers(t, sqlstore.MySQL)
}

func charOrderNumbers(t *testing.T, d sqlstore.Dialect) {
	ctx := context.Background()
	db := openDB(t, d)
	s := hostStore(t, db, d, charNo)
	require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "o-1", UserID: "u1", ShowID: "sh", Seats: []string{"A1"}, ExpireAt: time.Now().Add(-time.Minute)}))
	require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "o-2", UserID: "u1", ShowID: "sh", Seats: []string{"A2"}, ExpireAt: time.Now().Add(time.Hour)}))

	var failures []string
	fail := func(f string, a ...any) { failures = append(failures, fmt.Sprintf(f, a...)) }
	st, err := s.Statuses(ctx, []string{"o-1", "o-2"})
	require.NoError(t, err)
	for _, no := range []string{"o-1", "o-2"} {
		if _, ok := st[no]; !ok {
			fail("Statuses answers nothing for the live order %s (a reconciler takes it for missing and frees its seats)", no)
		}
	}
	claims, _, err := s.Claims(ctx, "", 100)
	require.NoError(t, err)
	for _, c := range claims {
		if c.OrderNo != "o-1" && c.OrderNo != "o-2" {
			fail("Claims names claim %s/%s's order %q", c.ShowID, c.SeatID, c.OrderNo)
		}
	}
	nos, _, err := s.Expired(ctx, "", 10)
	require.NoError(t, err)
	ended := false
	for _, no := range nos {
		res, err := s.CancelPending(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		if err != nil {
			fail("the due-guarded cancel of %q, as Expired returned it: %v", no, err)
			continue
		}
		ended = ended || res.Changed
	}
	if !ended {
		fail("the due order o-1 was not ended through what Expired returned (%q)", nos)
	}
	require.Empty(t, failures, "%s, CHAR(12) order numbers:\n%s", d, strings.Join(failures, "\n"))
}
