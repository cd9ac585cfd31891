// Package sqlstore is the SQL adapter of orderexpiry, on database/sql, for
// MySQL/MariaDB (go-sql-driver/mysql), PostgreSQL (pgx's stdlib driver) and
// SQLite (modernc.org/sqlite). The host opens the *sql.DB with its driver;
// this package imports none of them (it reads go-sql-driver/mysql's error
// numbers by reflection, see mysqlErrorNumber).
//
// A Store is the core's order store, cancel.OrderStore: the transitions
// (Order, CancelPending, PayPending) in transition.go, the discrepancies in
// discrepancy.go, the optional transitions (ReinstateCancelled,
// SetDeadline, MarkWarned) in late.go, CancelDue (many due orders in one
// transaction) in batch.go, and the reconciler's reads (Expired, Statuses,
// Claims) in reads.go.
//
// The schema (schema/*.sql, also returned by Schema) has three tables:
// oe_order, oe_order_seat, whose primary key (show_id, seat_id) allows one
// live claim per seat, and oe_payment_discrepancy, one row per payment that
// could not be honoured. Times are epoch milliseconds, and every "now" is
// the database's clock, truncated to the millisecond. Ids match byte for
// byte on every dialect (ascii_bin columns on MySQL/MariaDB, whose default
// collations are case-insensitive). Place inserts an order inside the host's
// own transaction.
//
// An existing order service keeps its own tables: New takes a Mapping that
// says where the library's notions live (table and columns, status values,
// the deadline's type or a creation time plus a window, the claims table
// and what a cancel and a payment do to it, constant conditions such as a
// tenant or a soft-delete flag, a version column), and Check verifies it
// against the live database at startup. The statements are generated once,
// in New, from validated and quoted names and validated constants; nothing
// a caller passes at run time becomes SQL text. On a mapped MySQL/MariaDB
// table every id is compared twice, in the column's collation (the index
// lookup) and as bytes, so a case-insensitive collation matches exactly.
// Overdue counts pending orders past their deadline for a gauge.
//
// The scans the reconciler pages through (Expired, Claims) are keyset scans
// that start each page at its cursor on an index, in the form each dialect's
// planner turns into a range: row values on PostgreSQL and SQLite, the OR
// form on MySQL/MariaDB. The due guard compares the deadline column itself
// with the database's now converted to the column's type, so the index on
// (status, deadline) bounds them.
//
// The compare-and-set statements always change what they match, so
// they are correct whatever the driver reports as affected rows (matched or
// changed, go-sql-driver/mysql's clientFoundRows). Serialization failures and
// deadlocks (PostgreSQL 40001/40P01, MariaDB 1020/1213) are retried; the
// retry sees the winner's status, so they end as "lost the race".
//
// Round trips (without a hook: SetHook): on PostgreSQL a cancel or a payment is one statement, a
// data-modifying CTE that does the compare-and-set and, only if it
// matched, deletes, releases or sells the claims, returning the order and
// its seats (atomic as one statement). Elsewhere it is a transaction: the
// compare-and-set, the order and its seats read, the claims changed; on
// MariaDB a cancel's DELETE … RETURNING does the last two at once. The
// statements are prepared once per Store (and by database/sql once per
// pooled connection), so each costs one round trip even with
// go-sql-driver/mysql's default DSN, which otherwise prepares and closes
// every statement that has arguments: an expired order costs 1 round trip
// on PostgreSQL and 4 on MariaDB, where a hand-written transaction costs 5
// and 8 (internal/bench part 2 measures what that buys). Close releases
// them.
//
// # Names
//
//   - Store, New, Dialect (MySQL, MySQL8, Postgres, SQLite), Schema: the SQL
//     order store, the databases it speaks, and the tables it creates for a
//     host without its own;
//   - Mapping, DefaultMapping, Orders, Claims, Statuses, Condition, IsNull,
//     HostWrites, Time, TimeType (EpochMillis, EpochSeconds, DateTimeUTC,
//     Timestamp), WindowSetting: a host's existing tables described to the store (the
//     mapping is the brownfield host's whole configuration, so each part of
//     it is a name), and ErrMapping when the tables do not match it.
package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Dialect names the SQL flavour of the database behind a Store.
type Dialect string

// The supported dialects.
const (
	MySQL    Dialect = "mysql" // MySQL 8 and MariaDB 10.6+
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
	// MySQL8 is MySQL without MariaDB's DELETE … RETURNING, whatever the
	// server says. MySQL finds out itself which server it talks to, so a
	// host need not name it; it exists so that MySQL 8's statements run
	// against MariaDB in CI, where no MySQL 8 can be installed (README).
	MySQL8 Dialect = "mysql8"
)

//go:embed schema/*.sql
var schemaFS embed.FS

// Schema returns the DDL of dialect as separate statements, each idempotent
// (CREATE … IF NOT EXISTS), for hosts that apply it with their own migration
// tool. Store.Migrate applies the same.
func Schema(d Dialect) ([]string, error) {
	if d == MySQL8 {
		d = MySQL
	}
	b, err := schemaFS.ReadFile("schema/" + string(d) + ".sql")
	if err != nil {
		return nil, fmt.Errorf("sqlstore: unknown dialect %q", d)
	}
	var out []string
	for _, stmt := range strings.Split(string(b), ";") {
		var lines []string
		for _, l := range strings.Split(stmt, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--") {
				lines = append(lines, l)
			}
		}
		if len(lines) > 0 {
			out = append(out, strings.Join(lines, "\n"))
		}
	}
	return out, nil
}

// Store implements the order side of orderexpiry on one *sql.DB. It is safe
// for concurrent use. With SQLite, open the database with a busy timeout and
// immediate transactions (see examples), or limit the pool to one connection.
type Store struct {
	db      *sql.DB
	dialect Dialect
	m       *resolved
	q       queries

	mu    sync.RWMutex
	stmts map[string]*sql.Stmt // the expiry path's statements, prepared once

	claimsQ sync.Map // int → stmt: the claims INSERT of n seats (claimsInsert)
	oneQ    sync.Map // int → stmt: placing n seats in one statement (placeOneStmt)

	maria  atomic.Int32 // 0 not asked yet, 1 MariaDB, 2 another server
	galera atomic.Int32 // 0 not asked yet, 1 a Galera node (wsrep_on), 2 not (see stillInTx)

	hook atomic.Pointer[cancel.Hook] // SetHook's; nil: none
}

// isMariaDB reports whether a MySQL-dialect store talks to MariaDB (which
// has DELETE … RETURNING, MySQL 8 not), asking the server once.
func (s *Store) isMariaDB(ctx context.Context) bool {
	if s.dialect != MySQL {
		return false
	}
	if v := s.maria.Load(); v != 0 {
		return v == 1
	}
	var version string
	if err := s.db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return false // asked again next time
	}
	if strings.Contains(version, "MariaDB") {
		s.maria.Store(1)
		return true
	}
	s.maria.Store(2)
	return false
}

// New returns a Store for db in dialect d, on the library's own schema, or
// on the host's tables when a Mapping is given (at most one; the zero
// Mapping is the library's schema). A mapping that names an invalid
// identifier or value is refused here; whether the tables match it is
// Check's question, which needs the database.
func New(db *sql.DB, d Dialect, mapping ...Mapping) (*Store, error) {
	plain := d == MySQL8
	if plain {
		d = MySQL
	}
	if _, ok := nowMS[d]; !ok {
		return nil, fmt.Errorf("sqlstore: unknown dialect %q", d)
	}
	if db == nil {
		return nil, errors.New("sqlstore: nil *sql.DB")
	}
	if len(mapping) > 1 {
		return nil, errors.New("sqlstore: at most one Mapping")
	}
	var m Mapping
	if len(mapping) == 1 {
		m = mapping[0]
	}
	r, err := resolve(d, m)
	if err != nil {
		return nil, err
	}
	q := r.build()
	bind := func(q string) string { return rebind(d, strings.ReplaceAll(q, "NOW_MS", nowMS[d])) }
	// MySQL: a duplicate key is error 1062 (INSERT IGNORE would hide other
	// errors, and ON DUPLICATE KEY UPDATE reports 1 row either way with
	// clientFoundRows). The others: 0 rows when recorded before.
	//
	// Every row carries the store's scope, and the primary key is (scope,
	// payment_id): a store records, claims, settles and looks up only its
	// own, and decides each of its payment ids once. One tenant's refunds
	// are never another's, and another tenant's decision of the same id
	// (its own provider account's) never answers for this one's.
	recordSQL := "INSERT INTO oe_payment_discrepancy (payment_id, scope, order_no, user_id, status, recorded_at_ms, tried_at_ms) VALUES (?, ?, ?, ?, ?, NOW_MS, NOW_MS)"
	if d != MySQL {
		recordSQL += " ON CONFLICT (scope, payment_id) DO NOTHING"
	}
	// The compare-and-set of a claim: only the claimer that read this
	// tried_at wins. The new tried_at is always greater than the old, so the
	// row always changes (changed and matched rows agree, whatever
	// clientFoundRows says, even if the clock stepped back). SQLite's
	// GREATEST is its scalar MAX of several arguments.
	claimSQL := "UPDATE oe_payment_discrepancy SET tried_at_ms = GREATEST(NOW_MS, tried_at_ms + 1) WHERE payment_id = ? AND scope = ? AND tried_at_ms = ? AND settled_at_ms IS NULL"
	if d == SQLite {
		claimSQL = "UPDATE oe_payment_discrepancy SET tried_at_ms = MAX(NOW_MS, tried_at_ms + 1) WHERE payment_id = ? AND scope = ? AND tried_at_ms = ? AND settled_at_ms IS NULL"
	}
	q.recordDiscrepancy = bind(recordSQL)
	q.dueDiscrepancies = bind("SELECT payment_id, order_no, user_id, status, tried_at_ms FROM oe_payment_discrepancy WHERE scope = ? AND settled_at_ms IS NULL AND tried_at_ms <= (SELECT NOW_MS) - ? ORDER BY tried_at_ms, payment_id LIMIT ?")
	q.claimDiscrepancy = bind(claimSQL)
	q.settleDiscrepancy = bind("UPDATE oe_payment_discrepancy SET settled_at_ms = NOW_MS WHERE payment_id = ? AND scope = ? AND settled_at_ms IS NULL")
	q.discrepancyExists = bind("SELECT COUNT(*) FROM oe_payment_discrepancy WHERE payment_id = ? AND scope = ?")
	// A payment's decision row, in its transaction: the id recorded as
	// honoured (status 0, settled), so that one primary key decides every
	// payment id once, on time, late or refused (see late.go).
	q.decidePayment = bind("INSERT INTO oe_payment_discrepancy (payment_id, scope, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES (?, ?, ?, ?, 0, NOW_MS, NOW_MS, NOW_MS)")
	// The decision row of a payment that paid an order the host has since
	// deleted (see PayPending).
	q.honouredGone = bind("SELECT user_id FROM oe_payment_discrepancy WHERE payment_id = ? AND scope = ? AND order_no = ? AND status = 0")
	st := &Store{db: db, dialect: d, m: r, q: q, stmts: map[string]*sql.Stmt{}}
	if plain {
		st.maria.Store(2) // never MariaDB's statements
	}
	return st, nil
}

// Scope implements cancel.OrderStore: "" for the library's own schema (the
// whole table); with a Mapping, its orders table and its Where conditions
// sorted ("shop_order?tenant_id=7"), so that two services on tables of their
// own, or two tenants of one table, are two scopes. Give the seat store the
// same scope (redisseat.Seats.Scoped), so that this store's reconciler scans
// only its own seat locks; cancel.New and reconcile.New refuse a seat store
// of another scope.
func (s *Store) Scope() string {
	return s.m.scope
}

// args binds v to st for this store.
func (s *Store) args(st stmt, v vals) []any {
	v.scope = s.m.scope
	return st.args(v, numeric{user: s.m.raw.Orders.NumericUserID, show: s.m.raw.Orders.NumericShowID, no: s.m.raw.Orders.NumericOrderNo})
}

// rebind turns ? placeholders into $n for PostgreSQL. Queries here contain no
// string literals with '?', so a plain scan is exact.
func rebind(d Dialect, q string) string {
	if d != Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// Dialect returns the store's dialect.
func (s *Store) Dialect() Dialect { return s.dialect }

// prepared returns q prepared on the store's *sql.DB, preparing it on first
// use. database/sql then prepares it once per pooled connection and reuses
// it, inside transactions too (Tx.StmtContext), so each later execution is
// one round trip, where go-sql-driver/mysql otherwise sends a prepare and a
// close with every statement that has arguments. Call it before BeginTx,
// never inside a transaction: the first prepare takes a connection of its
// own, and transactions holding the whole pool would wait for it forever.
func (s *Store) prepared(ctx context.Context, q string) (*sql.Stmt, error) {
	s.mu.RLock()
	st := s.stmts[q]
	s.mu.RUnlock()
	if st != nil {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.stmts[q]; old != nil { // another goroutine won the race
		_ = st.Close()
		return old, nil
	}
	s.stmts[q] = st
	return st, nil
}

// Close closes the statements the store prepared. The *sql.DB is the host's
// and stays open; a store used after Close prepares its statements again.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for q, st := range s.stmts {
		errs = append(errs, st.Close())
		delete(s.stmts, q)
	}
	return errors.Join(errs...)
}

// Now returns the database's clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var ms int64
	if err := s.db.QueryRowContext(ctx, s.q.now.sql).Scan(&ms); err != nil {
		return time.Time{}, fmt.Errorf("sqlstore: now: %w", err)
	}
	return time.UnixMilli(ms), nil
}

// numericShow is show as the integer of a numeric show column; false when
// the column is numeric and show is not the canonical decimal form of an
// int64 (0, true when the column is a string).
func (s *Store) numericShow(show string) (int64, bool) {
	if !s.m.raw.Orders.NumericShowID {
		return 0, true
	}
	return canonicalInt(show)
}

// canonicalInt parses the canonical decimal form of an int64 ("42", never
// "042" or "+42").
func canonicalInt(v string) (int64, bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil && strconv.FormatInt(n, 10) == v
}

// user sets the user of v; false when the mapping's user column is numeric
// and u is not the canonical decimal form of an int64 (no order is u's).
func (s *Store) user(v vals, u string) (vals, bool) {
	v.user = u
	if !s.m.raw.Orders.NumericUserID || u == "" {
		return v, true
	}
	n, ok := canonicalInt(u)
	v.userNum = n
	return v, ok
}

// timeArg is the deadline argument of Place for at: epoch milliseconds
// (truncated) in an EpochMillis column, else epoch seconds rounded up (a
// deadline is never moved earlier), minus the payment window when the
// column is the creation time.
func (s *Store) timeArg(at time.Time) any {
	if s.m.scanCol().Type == EpochMillis {
		return at.UnixMilli() - s.m.window.Milliseconds()
	}
	sec := at.Unix()
	if at.After(time.Unix(sec, 0)) {
		sec++
	}
	return sec - int64(s.m.window/time.Second)
}

// status maps a status value as the database returned it. A value the
// mapping does not name, NULL included, is the host's own status
// (expiry.StatusHost, I19): never an error, which would fail every read of
// the order and every page of Statuses and Claims that holds it.
func (s *Store) status(key sql.NullString) expiry.Status {
	k, ok := s.m.statusOf[key.String]
	if !ok || !key.Valid {
		return expiry.StatusHost
	}
	return expiry.Status(k)
}

// paying says key is one of the mapping's Paying values.
func (s *Store) paying(key sql.NullString) bool {
	k, ok := s.m.statusOf[key.String]
	return ok && key.Valid && k == int(expiry.StatusHost) // only Paying values map to the host's kind
}

// Order implements cancel.OrderStore. An order whose status value is none
// of the mapping's (the host's own) reads with Status expiry.StatusHost; a
// NULL deadline (or creation time) reads as none, ExpireAt zero.
func (s *Store) Order(ctx context.Context, orderNo string) (expiry.Order, error) {
	o, _, err := s.orderRow(ctx, orderNo)
	return o, err
}

// orderRow reads an order and the payment that paid it ("" if none).
func (s *Store) orderRow(ctx context.Context, orderNo string) (expiry.Order, string, error) {
	if err := expiry.ValidateID("order number", orderNo); err != nil {
		return expiry.Order{}, "", fmt.Errorf("sqlstore: %w", err)
	}
	o := expiry.Order{No: orderNo}
	var status sql.NullString
	var nowMS int64
	var paymentID sql.NullString
	st, err := s.prepared(ctx, s.q.order.sql)
	if err != nil {
		return expiry.Order{}, "", fmt.Errorf("sqlstore: order %s: %w", orderNo, err)
	}
	err = st.QueryRowContext(ctx, s.args(s.q.order, vals{no: orderNo})...).Scan(idCol{&o.UserID}, idCol{&o.ShowID}, &status, deadlineCol{&o.ExpireAt}, &nowMS, &paymentID)
	unpad(&o.UserID, &o.ShowID)
	if errors.Is(err, sql.ErrNoRows) {
		return expiry.Order{}, "", fmt.Errorf("sqlstore: order %s: %w", orderNo, expiry.ErrNotFound)
	}
	if err != nil {
		return expiry.Order{}, "", fmt.Errorf("sqlstore: order %s: %w", orderNo, err)
	}
	o.Status = s.status(status)
	o.ReadAt = time.UnixMilli(nowMS)
	return o, paymentID.String, nil
}

var _ cancel.OrderStore = (*Store)(nil)
