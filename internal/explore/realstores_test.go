package explore

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// The replays' backends: cancel/sqlstore (SQLite in this process, MariaDB,
// PostgreSQL) and cancel/redisseat (Redis, Redis Cluster), each reset
// before every world instead of built anew.
//
// # Time
//
// The SQL stores decide by the database's clock (NOW_MS) and redisseat by
// the Redis server's (TIME in its scripts); neither can be moved. A clock
// step of the exploration ("clock: to the next deadline", a timeout
// reaching its deadline, settle's move past Grace, Settle and the refund
// lease) is replayed by moving every stored time back by the step instead:
// the SQL schema's every time column (sqlTimeColumns: deadlines, creation,
// last write, warning, a refund's records, tries and settle) and every
// lock's time in Redis (the <lockedMs> of its value). Each statement and
// script the stores run compares a stored time with its own clock's now, or
// takes the difference of two stored times, or adds a duration to now:
// never a stored time with a constant. Moving every stored time back by d
// therefore gives every such comparison the answer it would give d later,
// and leaves every difference of two stored times as it was. Why this
// cannot hide a bug of the stores:
//
//   - a time column the shift missed would look d younger and change
//     decisions (a lease never running out, an order never settled):
//     TestShiftCoversEveryTimeColumn fails when the schema has a time
//     column sqlTimeColumns lacks;
//   - a store reading a host's clock instead of its own (invariant I11)
//     would act the same here as without the shift (this process is the
//     host, its clock is the servers' clock): the replays neither find nor
//     hide that (TestNowTruncates and redisseat's clock tests do);
//   - real time goes on during a replay (milliseconds a step): a
//     comparison the exploration makes at an exact threshold (a deadline
//     reached by a timeout step, where "due" is deadline <= now) stays on
//     the same side, and every other step overshoots its threshold by a
//     second at least (settleAdvance);
//   - a lock's id in Redis is "<lockedMs>.<gen>": the time is part of it.
//     Rewriting the time rewrites the id, so the seat store is wrapped
//     (redisSeats) to give the library each lock's id as it was first seen
//     and to give the store the id the lock has now. The mapping is one
//     to one per show (the generation alone tells the locks of a show
//     apart), and the stores only ever compare ids for equality, so no
//     comparison changes its answer; a lock restored from SQL under its
//     kept id gets the moved time, as the lock itself would have had.

// sqlTimeColumns are the time columns of cancel/sqlstore's schema (epoch
// milliseconds) by table, every one moved by a clock step.
var sqlTimeColumns = map[string][]string{
	"oe_order":               {"expire_at_ms", "created_at_ms", "updated_at_ms", "warned_at_ms"},
	"oe_order_side":          {"created_at_ms", "warned_at_ms"},
	"oe_payment_discrepancy": {"recorded_at_ms", "tried_at_ms", "settled_at_ms"},
	"oe_order_seat":          nil,
}

// sqlOrders is cancel/sqlstore on the library's own schema, one database
// per tenant (as the exploration's memstore has one store per tenant, each
// serving its tenant's scope through gatedStore.Scope), or on a host's
// table shared by both tenants in one database (newSQLHostOrders).
type sqlOrders struct {
	d      sqlstore.Dialect
	dbs    []*sql.DB // per tenant: its database (the same one, shared)
	stores []*sqlstore.Store
	// tables are every table a world empties, with its time columns.
	tables map[string][]string
	// host is the host's orders and claims tables and, per tenant, the
	// Where its rows carry ("" on the library's schema: no soft delete).
	orders, claims string
	where          []string
}

// newSQLOrders migrates the schema into each database and returns the
// side.
func newSQLOrders(t testing.TB, d sqlstore.Dialect, dbs ...*sql.DB) *sqlOrders {
	t.Helper()
	s := &sqlOrders{d: d, dbs: dbs, tables: sqlTimeColumns, orders: "oe_order", claims: "oe_order_seat"}
	for _, db := range dbs {
		st, err := sqlstore.New(db, d)
		if err != nil {
			t.Fatalf("sqlstore.New: %v", err)
		}
		if err := st.Migrate(context.Background()); err != nil {
			t.Fatalf("sqlstore Migrate: %v", err)
		}
		t.Cleanup(func() { st.Close() })
		s.stores = append(s.stores, st)
		s.where = append(s.where, "")
	}
	return s
}

// hostTimeColumns are the time columns of the host's tables
// (newSQLHostOrders) and of the library's own tables beside them.
var hostTimeColumns = map[string][]string{
	"host_order":             {"expire_at_ms", "updated_at_ms"},
	"host_order_seat":        nil,
	"oe_order_side":          sqlTimeColumns["oe_order_side"],
	"oe_payment_discrepancy": sqlTimeColumns["oe_payment_discrepancy"],
}

// hostMapping is tenant n's Mapping of the host's tables: its rows are
// those of its tenant_id not soft-deleted (deleted = 0), so that both
// tenants' stores share one database's tables, the library's
// oe_payment_discrepancy and oe_order_side included, as a host running
// several tenants on one schema has them.
func hostMapping(n int) sqlstore.Mapping {
	return sqlstore.Mapping{
		Orders: sqlstore.Orders{
			Table: "host_order", OrderNo: "order_no", UserID: "user_id", ShowID: "show_id", Status: "status",
			Statuses:     sqlstore.Statuses{Pending: 0, Paid: []any{1}, Cancelled: []any{2}},
			Deadline:     sqlstore.Time{Column: "expire_at_ms", Type: sqlstore.EpochMillis},
			UpdatedAt:    sqlstore.Time{Column: "updated_at_ms", Type: sqlstore.EpochMillis},
			CancelReason: "cancel_reason", PaymentID: "payment_id",
			Where: []sqlstore.Condition{{Column: "tenant_id", Value: n}, {Column: "deleted", Value: 0}},
		},
		Claims: &sqlstore.Claims{Table: "host_order_seat", ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_no",
			Where: []sqlstore.Condition{{Column: "tenant_id", Value: n}}},
	}
}

// hostDDL is the host's tables (SQLite, MySQL and PostgreSQL alike).
var hostDDL = []string{
	`CREATE TABLE IF NOT EXISTS host_order (
		tenant_id     INT          NOT NULL,
		order_no      VARCHAR(64)  NOT NULL,
		user_id       VARCHAR(64)  NOT NULL,
		show_id       VARCHAR(64)  NOT NULL,
		status        INT          NOT NULL,
		expire_at_ms  BIGINT       NOT NULL,
		updated_at_ms BIGINT       NULL,
		cancel_reason VARCHAR(32)  NULL,
		payment_id    VARCHAR(64)  NULL,
		deleted       INT          NOT NULL DEFAULT 0,
		PRIMARY KEY (tenant_id, order_no)
	)`,
	"CREATE INDEX host_order_due ON host_order (tenant_id, deleted, status, expire_at_ms, order_no)",
	`CREATE TABLE IF NOT EXISTS host_order_seat (
		tenant_id INT         NOT NULL,
		show_id   VARCHAR(64) NOT NULL,
		seat_id   VARCHAR(64) NOT NULL,
		order_no  VARCHAR(64) NOT NULL,
		PRIMARY KEY (tenant_id, show_id, seat_id)
	)`,
	"CREATE INDEX host_order_seat_order ON host_order_seat (tenant_id, order_no)",
}

// newSQLHostOrders creates the host's tables in db and returns the side
// of n tenants on them, each a sqlstore.Store with its hostMapping.
func newSQLHostOrders(t testing.TB, d sqlstore.Dialect, db *sql.DB, n int) *sqlOrders {
	t.Helper()
	ctx := context.Background()
	for _, q := range hostDDL {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("the host's DDL: %v", err)
		}
	}
	s := &sqlOrders{d: d, tables: hostTimeColumns, orders: "host_order", claims: "host_order_seat"}
	for i := 1; i <= n; i++ {
		st, err := sqlstore.New(db, d, hostMapping(i))
		if err != nil {
			t.Fatalf("sqlstore.New: %v", err)
		}
		if err := st.Migrate(ctx); err != nil {
			t.Fatalf("sqlstore Migrate: %v", err)
		}
		if err := st.Check(ctx); err != nil {
			t.Fatalf("sqlstore Check: %v", err)
		}
		t.Cleanup(func() { st.Close() })
		s.dbs, s.stores = append(s.dbs, db), append(s.stores, st)
		s.where = append(s.where, fmt.Sprintf(" AND tenant_id = %d", i))
	}
	return s
}

// openSQLite opens a SQLite database of its own in a temporary file, with
// a busy timeout and immediate transactions as the package documentation
// of sqlstore asks; synchronous off, since nothing here survives a crash of
// the machine.
func openSQLite(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "replay.db")+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)&_txlock=immediate")
	if err != nil {
		t.Fatalf("open SQLite: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func (s *sqlOrders) open(_ *fakeClock, n int) ([]orderStore, []insertFunc, []hostRows, error) {
	if n > len(s.stores) {
		return nil, nil, nil, fmt.Errorf("%d tenants, %d stores", n, len(s.stores))
	}
	ctx := context.Background()
	for _, db := range s.distinct() {
		for table := range s.tables {
			if _, err := db.ExecContext(ctx, "DELETE FROM "+table); err != nil {
				return nil, nil, nil, fmt.Errorf("empty %s: %w", table, err)
			}
		}
	}
	var stores []orderStore
	var inserts []insertFunc
	var hosts []hostRows
	for i, st := range s.stores[:n] {
		stores = append(stores, st)
		inserts = append(inserts, st.Insert(s.dbs[i], nil))
		hosts = append(hosts, sqlHost{s: s, db: s.dbs[i], where: s.where[i]})
	}
	return stores, inserts, hosts, nil
}

// distinct is each database once.
func (s *sqlOrders) distinct() []*sql.DB {
	var out []*sql.DB
	for _, db := range s.dbs {
		if !slices.Contains(out, db) {
			out = append(out, db)
		}
	}
	return out
}

// shift moves every stored time back by d (see "Time" above); a negative
// d moves them forward: the database's clock stepped back.
func (s *sqlOrders) shift(ctx context.Context, d time.Duration) error {
	ms := d.Milliseconds()
	for _, db := range s.distinct() {
		for table, cols := range s.tables {
			if len(cols) == 0 {
				continue
			}
			var set []string
			for _, c := range cols {
				set = append(set, fmt.Sprintf("%s = %s - %d", c, c, ms))
			}
			if _, err := db.ExecContext(ctx, "UPDATE "+table+" SET "+strings.Join(set, ", ")); err != nil {
				return fmt.Errorf("shift %s: %w", table, err)
			}
		}
	}
	return nil
}

// sqlHost is the host's part on one tenant's rows, in its own statements.
type sqlHost struct {
	s     *sqlOrders
	db    *sql.DB
	where string // the tenant's condition ("" on the library's schema)
}

func (h sqlHost) exec(ctx context.Context, q, no string) (int64, error) {
	if h.s.d == sqlstore.Postgres {
		q = strings.Replace(q, "?", "$1", 1)
	}
	r, err := h.db.ExecContext(ctx, q, no)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// delete: a hard delete removes the order's row and its claims (a
// cancelled order has none left); a soft one sets the flag the tenant's
// Where excludes, on the host's table only (the library's schema has none).
func (h sqlHost) delete(ctx context.Context, no string, soft bool) error {
	q := "DELETE FROM " + h.s.orders + " WHERE order_no = ?" + h.where
	if soft {
		if h.where == "" {
			return fmt.Errorf("the library's schema has no soft-delete flag: %w", cancel.ErrUnsupported)
		}
		q = "UPDATE " + h.s.orders + " SET deleted = 1 WHERE order_no = ?" + h.where
	}
	n, err := h.exec(ctx, q, no)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("order %s: %d rows deleted", no, n)
	}
	if !soft {
		_, err = h.exec(ctx, "DELETE FROM "+h.s.claims+" WHERE order_no = ?"+h.where, no)
	}
	return err
}

// hold is not replayed (the replays leave out sequences with a hold: see
// replayable): SQLite has no row lock (a writer holds the whole database),
// and the servers' lock waits answer in real time.
func (h sqlHost) hold(context.Context, string) (func(), error) {
	return nil, fmt.Errorf("the replays hold no row: %w", cancel.ErrUnsupported)
}

// redisSide is cancel/redisseat on one Redis (or Redis Cluster), under a
// namespace of the test's own; each tenant's scope of it is Scoped.
type redisSide struct {
	rdb  redis.UniversalClient
	ns   string
	root *redisseat.Seats
	ids  *idMap // the current world's
}

func newRedisSide(t testing.TB, rdb redis.UniversalClient) *redisSide {
	t.Helper()
	ns := "oe-replay-" + testenv.Unique()
	root, err := redisseat.New(rdb, ns)
	if err != nil {
		t.Fatalf("redisseat.New: %v", err)
	}
	r := &redisSide{rdb: rdb, ns: ns, root: root}
	t.Cleanup(func() { _ = r.reset(context.Background()) })
	return r
}

// scopes are the seat store's scopes a world uses: the whole store and
// each tenant's.
var scopes = []string{"", "tenant-1", "tenant-2"}

// namespace is where the keys of scope live (redisseat's layout: see
// Seats.Scoped).
func (r *redisSide) namespace(scope string) string {
	if scope == "" {
		return r.ns
	}
	return r.ns + ":" + url.QueryEscape(scope)
}

// keys are every key a world may write (redisseat's documented layout),
// the refund record of each payment id and the set of shows with sales
// included: a refund marked in one world must not be read in the next.
func (r *redisSide) keys() []string {
	var out []string
	for _, sc := range scopes {
		ns := r.namespace(sc)
		out = append(out, ns+":shows", ns+":restored", ns+":sold")
		for _, p := range payments {
			out = append(out, ns+":refund:{"+p.id+"}")
		}
		for _, show := range []string{show1, show2} {
			for _, k := range []string{"seats", "limit", "locked", "gen"} {
				out = append(out, ns+":{"+show+"}:"+k)
			}
		}
	}
	return out
}

// reset deletes the keys one by one (on Redis Cluster they live on several
// nodes).
func (r *redisSide) reset(ctx context.Context) error {
	for _, k := range r.keys() {
		if err := r.rdb.Del(ctx, k).Err(); err != nil {
			return fmt.Errorf("reset %s: %w", k, err)
		}
	}
	return nil
}

func (r *redisSide) open(*fakeClock) (seats, error) {
	ctx := context.Background()
	if err := r.reset(ctx); err != nil {
		return seats{}, err
	}
	r.ids = &idMap{toStore: map[string]string{}, toLibrary: map[string]string{}}
	return seats{
		root: &redisSeats{Seats: r.root, ids: r.ids, scope: ""},
		scoped: func(scope string) seatStore {
			return &redisSeats{Seats: r.root.Scoped(scope), ids: r.ids, scope: scope}
		},
		now: func(ctx context.Context) (time.Time, error) {
			return r.rdb.Time(ctx).Result()
		},
	}, nil
}

// shift moves every lock's time back by d, and its id with it (see "Time"
// above).
func (r *redisSide) shift(ctx context.Context, d time.Duration) error {
	ms := d.Milliseconds()
	for _, sc := range scopes {
		for _, show := range []string{show1, show2} {
			key := r.namespace(sc) + ":{" + show + "}:seats"
			all, err := r.rdb.HGetAll(ctx, key).Result()
			if err != nil {
				return fmt.Errorf("shift %s: %w", key, err)
			}
			for seat, v := range all {
				parts := strings.Split(v, "|")
				if parts[0] != "L" || len(parts) != 5 {
					continue
				}
				at, err := strconv.ParseInt(parts[3], 10, 64)
				if err != nil {
					return fmt.Errorf("shift %s %s: lock time %q: %w", key, seat, parts[3], err)
				}
				r.ids.library(sc, show, parts[3]+"."+parts[4]) // known from now on
				parts[3] = strconv.FormatInt(at-ms, 10)
				if err := r.rdb.HSet(ctx, key, seat, strings.Join(parts, "|")).Err(); err != nil {
					return fmt.Errorf("shift %s %s: %w", key, seat, err)
				}
			}
		}
	}
	r.ids.shift(ms)
	return nil
}

// idMap maps each lock's id as the library first saw it to the id the
// lock has in Redis now (its time moved by the clock steps since), per
// scope and show. Every id the seat store gives out goes through library,
// every id given to it through store.
type idMap struct {
	mu        sync.Mutex
	toStore   map[string]string // scope|show|library id → store id
	toLibrary map[string]string // scope|show|store id → library id
}

func (l *idMap) library(scope, show, id string) string {
	if id == "" {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := scope + "|" + show + "|"
	if lib, ok := l.toLibrary[k+id]; ok {
		return lib
	}
	l.toLibrary[k+id], l.toStore[k+id] = id, id
	return id
}

func (l *idMap) store(scope, show, id string) string {
	if id == "" {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st, ok := l.toStore[scope+"|"+show+"|"+id]; ok {
		return st
	}
	return id
}

// shift moves every store id's time back by ms.
func (l *idMap) shift(ms int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.toLibrary = map[string]string{}
	for k, st := range l.toStore {
		at, gen, _ := strings.Cut(st, ".")
		n, _ := strconv.ParseInt(at, 10, 64) // ids are the store's: decimal
		moved := strconv.FormatInt(n-ms, 10)
		if gen != "" {
			moved += "." + gen
		}
		l.toStore[k] = moved
		scope, rest, _ := strings.Cut(k, "|")
		show, lib, _ := strings.Cut(rest, "|")
		l.toLibrary[scope+"|"+show+"|"+moved] = lib
	}
}

// redisSeats is one scope of redisseat with lock ids translated (idMap).
type redisSeats struct {
	*redisseat.Seats
	ids   *idMap
	scope string
}

func (s *redisSeats) hold(h cancel.Hold) cancel.Hold {
	h.LockID = s.ids.store(s.scope, h.ShowID, h.LockID)
	return h
}

func (s *redisSeats) Lock(ctx context.Context, h cancel.Hold, limit int) (string, error) {
	id, err := s.Seats.Lock(ctx, h, limit)
	return s.ids.library(s.scope, h.ShowID, id), err
}

func (s *redisSeats) Release(ctx context.Context, h cancel.Hold) (int, error) {
	return s.Seats.Release(ctx, s.hold(h))
}

func (s *redisSeats) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	in := make([]cancel.Hold, len(holds))
	for i, h := range holds {
		in[i] = s.hold(h)
	}
	return s.Seats.ReleaseAll(ctx, in)
}

func (s *redisSeats) SeatStates(ctx context.Context, show string, seats []string) (map[string]cancel.SeatState, error) {
	st, err := s.Seats.SeatStates(ctx, show, seats)
	for seat, v := range st {
		v.LockID = s.ids.library(s.scope, show, v.LockID)
		st[seat] = v
	}
	return st, err
}

func (s *redisSeats) Sell(ctx context.Context, h cancel.Hold) (int, error) {
	return s.Seats.Sell(ctx, s.hold(h))
}

func (s *redisSeats) ScanLocks(ctx context.Context, cursor string, count int) ([]cancel.SeatLock, string, error) {
	locks, next, err := s.Seats.ScanLocks(ctx, cursor, count)
	for i := range locks {
		locks[i].LockID = s.ids.library(s.scope, locks[i].ShowID, locks[i].LockID)
	}
	return locks, next, err
}

func (s *redisSeats) Show(ctx context.Context, show string) (map[string]cancel.SeatState, error) {
	st, err := s.Seats.Show(ctx, show)
	for seat, v := range st {
		v.LockID = s.ids.library(s.scope, show, v.LockID)
		st[seat] = v
	}
	return st, err
}

func (s *redisSeats) claims(cs []cancel.Claim, in bool) []cancel.Claim {
	out := make([]cancel.Claim, len(cs))
	for i, c := range cs {
		if in {
			c.LockID = s.ids.store(s.scope, c.ShowID, c.LockID)
		} else {
			c.LockID = s.ids.library(s.scope, c.ShowID, c.LockID)
		}
		out[i] = c
	}
	return out
}

func (s *redisSeats) Restore(ctx context.Context, claims []cancel.Claim) (int, error) {
	return s.Seats.Restore(ctx, s.claims(claims, true))
}

func (s *redisSeats) Missing(ctx context.Context, claims []cancel.Claim) ([]cancel.Claim, error) {
	out, err := s.Seats.Missing(ctx, s.claims(claims, true))
	return s.claims(out, false), err
}
