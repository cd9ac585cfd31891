// Package sqlstore is the SQL adapter of orderexpiry, on database/sql, for
// MySQL/MariaDB (go-sql-driver/mysql), PostgreSQL (pgx's stdlib driver) and
// SQLite (modernc.org/sqlite). The host opens the *sql.DB with its driver;
// this package imports none of them (it reads go-sql-driver/mysql's error
// numbers by reflection, see mysqlErrorNumber).
//
// One Store serves every interface the core declares over orders:
//   - cancel.OrderStore (Order, CancelPending, PayPending),
//   - cancel.DiscrepancyStore (RecordDiscrepancy, ClaimDiscrepancies,
//     SettleDiscrepancy),
//   - cancel.Reinstater (ReinstateCancelled), cancel.DeadlineStore
//     (SetDeadline) and cancel.WarnStore (MarkWarned), in late.go,
//   - reconcile.Orders (Expired, Statuses, Claims).
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
// Round trips: on PostgreSQL a cancel or a payment is one statement, a
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
package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
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

	maria atomic.Int32 // 0 not asked yet, 1 MariaDB, 2 another server
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
	// Every row carries the store's scope: a store claims, settles and
	// looks up only its own (one tenant's refunds are never another's),
	// while the primary key decides each payment id once across scopes.
	recordSQL := "INSERT INTO oe_payment_discrepancy (payment_id, scope, order_no, user_id, status, recorded_at_ms, tried_at_ms) VALUES (?, ?, ?, ?, ?, NOW_MS, NOW_MS)"
	if d != MySQL {
		recordSQL += " ON CONFLICT (payment_id) DO NOTHING"
	}
	// The compare-and-set of a claim: only the claimer that read this
	// tried_at wins. The new tried_at is always greater than the old, so the
	// row always changes (changed and matched rows agree, whatever
	// clientFoundRows says, even if the clock stepped back). SQLite's
	// GREATEST is its scalar MAX of several arguments.
	claimSQL := "UPDATE oe_payment_discrepancy SET tried_at_ms = GREATEST(NOW_MS, tried_at_ms + 1) WHERE payment_id = ? AND tried_at_ms = ? AND settled_at_ms IS NULL"
	if d == SQLite {
		claimSQL = "UPDATE oe_payment_discrepancy SET tried_at_ms = MAX(NOW_MS, tried_at_ms + 1) WHERE payment_id = ? AND tried_at_ms = ? AND settled_at_ms IS NULL"
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
	st := &Store{db: db, dialect: d, m: r, q: q, stmts: map[string]*sql.Stmt{}}
	if plain {
		st.maria.Store(2) // never MariaDB's statements
	}
	return st, nil
}

// Scope implements cancel.Scoped: "" for the library's own schema (the
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
	return st.args(v, numeric{user: s.m.raw.Orders.NumericUserID, show: s.m.raw.Orders.NumericShowID})
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

// Migrate applies Schema(dialect), then upgrades tables that an earlier
// version of this package created (CREATE TABLE IF NOT EXISTS leaves them as
// they are): it adds oe_order.payment_id, seats and warned_at_ms and, on MySQL/MariaDB, gives the id
// columns their byte-exact collation (ascii_bin; this rebuilds the table
// once). Every step looks before it changes anything, so Migrate is
// idempotent, and safe to run from several hosts at once.
//
// On a store with a Mapping, Migrate creates only the library's own tables,
// oe_payment_discrepancy and oe_order_side (the statements of Schema that
// name them), and never touches the host's tables: their migrations are the
// host's. On every store it adds oe_payment_discrepancy.scope where it is
// missing (rows recorded before it are the library's schema's, scope "").
func (s *Store) Migrate(ctx context.Context) error {
	stmts, err := Schema(s.dialect)
	if err != nil {
		return err
	}
	var onScope []string // indexes on oe_payment_discrepancy.scope: after upgradeScope
	for _, q := range stmts {
		if !s.m.defaultSchema && !strings.Contains(q, "oe_payment_discrepancy") && !strings.Contains(q, "oe_order_side") {
			continue
		}
		if strings.HasPrefix(q, "CREATE INDEX") && strings.Contains(q, "(scope,") {
			onScope = append(onScope, q)
			continue
		}
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sqlstore: migrate: %w", err)
		}
	}
	if err := s.upgradeScope(ctx); err != nil {
		return fmt.Errorf("sqlstore: migrate: upgrade: %w", err)
	}
	for _, q := range onScope {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sqlstore: migrate: %w", err)
		}
	}
	if !s.m.defaultSchema {
		return nil
	}
	if err := s.upgrade(ctx); err != nil {
		return fmt.Errorf("sqlstore: migrate: upgrade: %w", err)
	}
	return nil
}

// byteExactIDs are the MySQL id columns by table, and the statement that
// makes them all ascii_bin at once (one table rebuild).
var byteExactIDs = []struct {
	table   string
	columns []string
	alter   string
}{
	{"oe_order", []string{"order_no", "user_id", "show_id", "cancel_reason"},
		"ALTER TABLE oe_order MODIFY order_no VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, MODIFY user_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, MODIFY show_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, MODIFY cancel_reason VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL"},
	{"oe_order_seat", []string{"show_id", "seat_id", "order_no"},
		"ALTER TABLE oe_order_seat MODIFY show_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, MODIFY seat_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, MODIFY order_no VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL"},
}

// addPaymentID adds oe_order.payment_id, by dialect.
var addPaymentID = map[Dialect]string{
	MySQL:    "ALTER TABLE oe_order ADD COLUMN payment_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL",
	Postgres: "ALTER TABLE oe_order ADD COLUMN payment_id VARCHAR(64)",
	SQLite:   "ALTER TABLE oe_order ADD COLUMN payment_id TEXT",
}

// addScope adds oe_payment_discrepancy.scope (and on MySQL its indexes, which
// the other dialects create with Schema's statements after it), by dialect.
// Rows recorded before it belong to the library's own schema's scope, "".
var addScope = map[Dialect]string{
	MySQL:    "ALTER TABLE oe_payment_discrepancy ADD COLUMN scope VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '', ADD KEY oe_payment_discrepancy_scope_due (scope, settled_at_ms, tried_at_ms), ADD KEY oe_payment_discrepancy_order (scope, order_no, status)",
	Postgres: "ALTER TABLE oe_payment_discrepancy ADD COLUMN scope VARCHAR(255) NOT NULL DEFAULT ''",
	SQLite:   "ALTER TABLE oe_payment_discrepancy ADD COLUMN scope VARCHAR(255) NOT NULL DEFAULT ''",
}

// upgradeScope adds oe_payment_discrepancy.scope where it is missing
// (Migrate, on every store).
func (s *Store) upgradeScope(ctx context.Context) error {
	has, err := s.hasColumn(ctx, "oe_payment_discrepancy", "scope")
	if err != nil || has {
		return err
	}
	if _, err := s.db.ExecContext(ctx, addScope[s.dialect]); err != nil && !isDuplicateColumn(err) {
		return fmt.Errorf("add oe_payment_discrepancy.scope: %w", err)
	}
	return nil
}

// upgrade is Migrate's second half: see there.
func (s *Store) upgrade(ctx context.Context) error {
	has, err := s.hasColumn(ctx, "oe_order", "payment_id")
	if err != nil {
		return err
	}
	if !has {
		if _, err := s.db.ExecContext(ctx, addPaymentID[s.dialect]); err != nil && !isDuplicateColumn(err) {
			return err // a concurrent Migrate adding it first is success
		}
	}
	if err := s.upgradeLate(ctx); err != nil { // late.go: seats, warned_at_ms
		return err
	}
	if s.dialect != MySQL {
		return nil
	}
	for _, t := range byteExactIDs {
		exact := true
		for _, c := range t.columns {
			var collation sql.NullString
			err := s.db.QueryRowContext(ctx, "SELECT COLLATION_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?", t.table, c).Scan(&collation)
			if err != nil {
				return fmt.Errorf("collation of %s.%s: %w", t.table, c, err)
			}
			exact = exact && collation.String == "ascii_bin"
		}
		if !exact {
			if _, err := s.db.ExecContext(ctx, t.alter); err != nil {
				return fmt.Errorf("%s: byte-exact ids: %w", t.table, err)
			}
		}
	}
	return nil
}

// hasColumn reports whether the store's table has column.
func (s *Store) hasColumn(ctx context.Context, table, column string) (bool, error) {
	var q string
	switch s.dialect {
	case MySQL:
		q = "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?"
	case Postgres:
		q = "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 AND column_name = $2"
	default:
		q = "SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?"
	}
	var n int
	if err := s.db.QueryRowContext(ctx, q, table, column).Scan(&n); err != nil {
		return false, fmt.Errorf("columns of %s: %w", table, err)
	}
	return n > 0, nil
}

// isDuplicateColumn reports an ADD COLUMN of a column that exists.
func isDuplicateColumn(err error) bool {
	if n, ok := mysqlErrorNumber(err); ok {
		return n == myErrDupFieldName
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		return pg.SQLState() == "42701"
	}
	return strings.Contains(err.Error(), "duplicate column name")
}

// Now returns the database's clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var ms int64
	if err := s.db.QueryRowContext(ctx, s.q.now.sql).Scan(&ms); err != nil {
		return time.Time{}, fmt.Errorf("sqlstore: now: %w", err)
	}
	return time.UnixMilli(ms), nil
}

// Place inserts a pending order and its seat claims in the host's
// transaction q (see Querier: a *sql.Tx, or the transaction of gorm, sqlx,
// ent, or a pgx session). An order number that exists already gives an error
// wrapping cancel.ErrOrderExists (the existing order is untouched: a retry
// after an unknown commit, a double submit); a seat that another live order
// holds gives one wrapping cancel.ErrSeatUnavailable. After either, the
// transaction is unusable on PostgreSQL: roll it back. It sends nothing:
// cancel.Service.Place sends the expiry message once the host's function
// that called Place has returned nil, its commit.
//
// With a Mapping it writes the mapped columns only (number, user, show,
// pending status, deadline or creation time, updated-at, the Where
// constants; the claims with their Locked state and constants): the host's
// other columns need defaults, or the host inserts its rows itself.
func (s *Store) Place(ctx context.Context, q Querier, p cancel.Placement) error {
	return s.place(ctx, q, false, p)
}

// place is Place; own says q is a transaction of the store's own *sql.DB,
// whose prepared statements it may run.
func (s *Store) place(ctx context.Context, q Querier, own bool, p cancel.Placement) error {
	v, err := s.placeArgs(p)
	if err != nil {
		return err
	}
	return s.placeVals(ctx, q, own, p, v)
}

// placeArgs checks p and binds it for Place's statements.
func (s *Store) placeArgs(p cancel.Placement) (vals, error) {
	if err := p.Validate(); err != nil {
		return vals{}, fmt.Errorf("sqlstore: place: %w", err)
	}
	v, ok := s.user(vals{no: p.OrderNo, show: p.ShowID}, p.UserID)
	if !ok {
		return vals{}, fmt.Errorf("sqlstore: place order %s: %w: user id %q is not a canonical integer (the mapping's user column is numeric)", p.OrderNo, expiry.ErrInvalidID, p.UserID)
	}
	if v.showNum, ok = s.numericShow(p.ShowID); !ok {
		return vals{}, fmt.Errorf("sqlstore: place order %s: %w: show id %q is not a canonical integer (the mapping's show column is numeric)", p.OrderNo, expiry.ErrInvalidID, p.ShowID)
	}
	v.deadline, v.seats, v.seatLimit, v.lockID = s.timeArg(p.ExpireAt), seatList(p.Seats), p.Limit, p.LockID
	return v, nil
}

// placeVals is Place once p is bound.
func (s *Store) placeVals(ctx context.Context, q Querier, own bool, p cancel.Placement, v vals) error {
	if _, err := s.execTx(ctx, q, own, s.q.insertOrder, s.args(s.q.insertOrder, v)); err != nil {
		if isDuplicate(err) { // the order number is the orders' unique key
			return fmt.Errorf("sqlstore: place order %s: %w", p.OrderNo, cancel.ErrOrderExists)
		}
		return fmt.Errorf("sqlstore: place order %s: %w", p.OrderNo, err)
	}
	if st := s.q.insertSide; st.sql != "" {
		if _, err := s.execTx(ctx, q, own, st, s.args(st, v)); err != nil {
			return fmt.Errorf("sqlstore: place order %s: side row: %w", p.OrderNo, err)
		}
	}
	if !s.m.claims {
		return nil
	}
	// Every claim in one statement: one round trip whatever the number of
	// seats. A duplicate key names no seat, so the error names the show.
	st := s.claimsInsert(len(p.Seats))
	args := make([]any, 0, len(st.slots))
	for _, seat := range p.Seats {
		v.seat = seat
		args = append(args, s.args(s.q.insertSeat, v)...)
	}
	if _, err := s.execTx(ctx, q, own, st, args); err != nil {
		if isDuplicate(err) {
			return fmt.Errorf("sqlstore: place order %s: a seat of %s %v: %w", p.OrderNo, p.ShowID, p.Seats, cancel.ErrSeatUnavailable)
		}
		return fmt.Errorf("sqlstore: place order %s: seats %v: %w", p.OrderNo, p.Seats, err)
	}
	return nil
}

// preparedClaims is the most seats whose multi-row claims INSERT is kept
// prepared: one statement per seat count, per pooled connection, so the
// common orders (a few seats) save their prepare round trip without a
// 50-seat order leaving 50 statements on every connection.
const preparedClaims = 8

// claimsInsert is the INSERT of n claims, built once per n.
func (s *Store) claimsInsert(n int) stmt {
	if n == 1 {
		return s.q.insertSeat
	}
	if st, ok := s.claimsQ.Load(n); ok {
		return st.(stmt)
	}
	st := s.m.claimsInsert(s.dialect, n)
	s.claimsQ.Store(n, st)
	return st
}

// preparePlace prepares Place's statements for an order of n seats, before
// its transaction begins (see prepared: never inside one). Place then finds
// them prepared. A failure is not an error: Place sends them unprepared.
func (s *Store) preparePlace(ctx context.Context, n int) {
	qs := [3]string{s.q.insertOrder.sql, s.q.insertSide.sql}
	if s.m.claims && n <= preparedClaims {
		qs[2] = s.claimsInsert(n).sql
	}
	for _, q := range qs {
		if q != "" {
			if _, err := s.prepared(ctx, q); err != nil {
				return
			}
		}
	}
}

// execTx runs st on q: through its prepared statement when q is a
// transaction of the store's own *sql.DB (own) and the statement was
// prepared before the transaction (preparePlace), else as plain text. It
// never prepares inside a transaction.
func (s *Store) execTx(ctx context.Context, q Querier, own bool, st stmt, args []any) (sql.Result, error) {
	if tx, ok := q.(*sql.Tx); ok && own {
		s.mu.RLock()
		ps := s.stmts[st.sql]
		s.mu.RUnlock()
		if ps != nil {
			return tx.StmtContext(ctx, ps).ExecContext(ctx, args...)
		}
	}
	return q.ExecContext(ctx, st.sql, args...)
}

// nullIfEmpty is s, or NULL for "" (an id not known).
func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
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

// status maps a status value as the database returned it.
func (s *Store) status(key string) (expiry.Status, error) {
	k, ok := s.m.statusOf[key]
	if !ok {
		return 0, fmt.Errorf("status %q is none of the mapping's statuses", key)
	}
	return expiry.Status(k), nil
}

// Order implements cancel.OrderStore.
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
	var status string
	var expireMS, nowMS int64
	var paymentID sql.NullString
	st, err := s.prepared(ctx, s.q.order.sql)
	if err != nil {
		return expiry.Order{}, "", fmt.Errorf("sqlstore: order %s: %w", orderNo, err)
	}
	err = st.QueryRowContext(ctx, s.args(s.q.order, vals{no: orderNo})...).Scan(&o.UserID, &o.ShowID, &status, &expireMS, &nowMS, &paymentID)
	unpad(&o.UserID, &o.ShowID)
	if errors.Is(err, sql.ErrNoRows) {
		return expiry.Order{}, "", fmt.Errorf("sqlstore: order %s: %w", orderNo, expiry.ErrNotFound)
	}
	if err != nil {
		return expiry.Order{}, "", fmt.Errorf("sqlstore: order %s: %w", orderNo, err)
	}
	if o.Status, err = s.status(status); err != nil {
		return expiry.Order{}, "", fmt.Errorf("sqlstore: order %s: %w", orderNo, err)
	}
	o.ExpireAt, o.ReadAt = time.UnixMilli(expireMS), time.UnixMilli(nowMS)
	return o, paymentID.String, nil
}

// CancelPending implements cancel.OrderStore. With a Mapping it writes the
// cancelled status of req.Reason (Statuses.CancelledBy, else the first of
// Cancelled).
func (s *Store) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	q, one := s.q.cancel, s.q.cancelOne
	switch {
	case req.UserID != "" && req.OnlyIfDue:
		return cancel.Result{}, errors.New("sqlstore: a cancel is either the user's or due, not both")
	case req.UserID != "":
		q, one = s.q.cancelOwner, s.q.cancelOwnerOne
	case req.OnlyIfDue:
		q, one = s.q.cancelDue, s.q.cancelDueOne
	}
	v, ok := s.user(vals{no: req.OrderNo, reason: string(req.Reason), status: s.m.cancelStatus(req.Reason)}, req.UserID)
	return s.transition(ctx, req.OrderNo, req.UserID, expiry.StatusCancelled, q, one, v, ok, s.q.deleteSeats)
}

// PayPending implements cancel.OrderStore. It stores p.PaymentID in the
// payment id column with the compare-and-set; on an order that is paid
// already, Result.PaymentID is the payment that paid it (empty for an order
// paid before payment ids were kept, or without a mapped payment column),
// so the caller tells a repeated callback (the same id) from a second
// payment (another one).
func (s *Store) PayPending(ctx context.Context, p cancel.Payment) (cancel.Result, error) {
	if err := p.Validate(); err != nil {
		return cancel.Result{}, fmt.Errorf("sqlstore: pay: %w", err)
	}
	q, one := s.q.pay, s.q.payOne
	if p.UserID != "" {
		q, one = s.q.payOwner, s.q.payOwnerOne
	}
	v, ok := s.user(vals{no: p.OrderNo, payment: p.PaymentID, status: s.m.paid[0].arg}, p.UserID)
	res, err := s.transition(ctx, p.OrderNo, p.UserID, expiry.StatusPaid, q, one, v, ok, s.q.sellSeats)
	if err != nil && isDuplicate(err) {
		// The decision row's primary key: the id was decided before.
		return cancel.Result{}, fmt.Errorf("sqlstore: pay %s: payment %s decided before: %w", p.OrderNo, p.PaymentID, cancel.ErrDiscrepancy)
	}
	if res.Changed {
		res.PaymentID = p.PaymentID
	}
	return res, err
}

// transition runs one state change to status to: the compare-and-set cas,
// then (if it matched) the order's seats are read and seatsQ (delete, sell,
// or nothing) is applied, all in one transaction; on PostgreSQL all of it
// is the one statement one. When the compare-and-set matches nothing, the
// order is read again to say why. canMatch false (a user id that cannot be
// anyone's) skips the compare-and-set.
func (s *Store) transition(ctx context.Context, orderNo, userID string, to expiry.Status, cas, one stmt, v vals, canMatch bool, seatsQ stmt) (cancel.Result, error) {
	var res cancel.Result
	var changed bool
	var err error
	switch {
	case !canMatch:
	case one.sql != "":
		res, changed, err = s.transitionOne(ctx, one, v)
	default:
		res, changed, err = s.transitionTx(ctx, cas, v, seatsQ)
	}
	if err != nil {
		return cancel.Result{}, fmt.Errorf("sqlstore: order %s: %w", orderNo, err)
	}
	if changed {
		res.Changed, res.Order.Status = true, to
		return res, nil
	}
	o, paymentID, err := s.orderRow(ctx, orderNo)
	if err != nil {
		return cancel.Result{}, err
	}
	if userID != "" && o.UserID != userID {
		return cancel.Result{}, fmt.Errorf("sqlstore: order %s: %w", orderNo, cancel.ErrNotOwner)
	}
	res = cancel.Result{Order: o}
	if o.Status == expiry.StatusPaid {
		res.PaymentID = paymentID
	}
	return res, nil
}

// transitionTx is a transition as a transaction of three statements.
func (s *Store) transitionTx(ctx context.Context, cas stmt, v vals, seatsQ stmt) (cancel.Result, bool, error) {
	if seatsQ.sql != "" && seatsQ.sql == s.q.deleteSeats.sql && s.q.deleteReturning.sql != "" && s.isMariaDB(ctx) {
		return s.transitionDeleteReturning(ctx, cas, v)
	}
	pay := v.payment != ""
	decideSQL := ""
	if pay {
		decideSQL = s.q.decidePayment
	}
	var stmts [4]*sql.Stmt // prepared before the transaction: see prepared
	for i, q := range []string{cas.sql, s.q.orderSeats.sql, seatsQ.sql, decideSQL} {
		if q == "" {
			continue
		}
		st, err := s.prepared(ctx, q)
		if err != nil {
			return cancel.Result{}, false, fmt.Errorf("prepare: %w", err)
		}
		stmts[i] = st
	}
	var res cancel.Result
	var changed bool
	err := s.retry(ctx, func(tx *sql.Tx) error {
		r, err := tx.StmtContext(ctx, stmts[0]).ExecContext(ctx, s.args(cas, v)...)
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		if err != nil {
			return err
		}
		if changed = n == 1; !changed {
			return nil
		}
		rows, err := tx.StmtContext(ctx, stmts[1]).QueryContext(ctx, s.args(s.q.orderSeats, v)...)
		if err != nil {
			return err
		}
		if res, err = readForTransition(rows, v.no, !s.m.claims); err != nil {
			return err
		}
		if stmts[3] != nil {
			// The payment id's decision row (see decidePayment): a
			// duplicate key rolls the whole transaction back.
			if _, err := tx.StmtContext(ctx, stmts[3]).ExecContext(ctx, v.payment, s.m.scope, v.no, res.Order.UserID); err != nil {
				return err
			}
		}
		if stmts[2] == nil {
			return nil
		}
		_, err = tx.StmtContext(ctx, stmts[2]).ExecContext(ctx, s.args(seatsQ, v)...)
		return err
	})
	return res, changed, err
}

// transitionDeleteReturning is a cancel on MariaDB: the compare-and-set,
// then one DELETE … RETURNING that frees the claims and returns them with
// the order's columns (4 round trips with BEGIN and COMMIT, not 5). An
// order without claims returns no row: it is read with orderSeats.
func (s *Store) transitionDeleteReturning(ctx context.Context, cas stmt, v vals) (cancel.Result, bool, error) {
	var stmts [3]*sql.Stmt
	for i, q := range []string{cas.sql, s.q.deleteReturning.sql, s.q.orderSeats.sql} {
		st, err := s.prepared(ctx, q)
		if err != nil {
			return cancel.Result{}, false, fmt.Errorf("prepare: %w", err)
		}
		stmts[i] = st
	}
	var res cancel.Result
	var changed bool
	err := s.retry(ctx, func(tx *sql.Tx) error {
		r, err := tx.StmtContext(ctx, stmts[0]).ExecContext(ctx, s.args(cas, v)...)
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		if err != nil {
			return err
		}
		if changed = n == 1; !changed {
			return nil
		}
		rows, err := tx.StmtContext(ctx, stmts[1]).QueryContext(ctx, s.args(s.q.deleteReturning, v)...)
		if err != nil {
			return err
		}
		res, err = readForTransition(rows, v.no, !s.m.claims)
		if errors.Is(err, sql.ErrNoRows) {
			if rows, err = tx.StmtContext(ctx, stmts[2]).QueryContext(ctx, s.args(s.q.orderSeats, v)...); err != nil {
				return err
			}
			res, err = readForTransition(rows, v.no, !s.m.claims)
		}
		slices.Sort(res.Seats) // RETURNING has no ORDER BY
		return err
	})
	return res, changed, err
}

// transitionOne is a transition as one statement (PostgreSQL): no row back
// means the compare-and-set matched nothing. A serialization failure or a
// deadlock is retried like a transaction.
func (s *Store) transitionOne(ctx context.Context, one stmt, v vals) (cancel.Result, bool, error) {
	st, err := s.prepared(ctx, one.sql)
	if err != nil {
		return cancel.Result{}, false, fmt.Errorf("prepare: %w", err)
	}
	var res cancel.Result
	var changed bool
	for attempt := 1; ; attempt++ {
		var rows *sql.Rows
		rows, err = st.QueryContext(ctx, s.args(one, v)...)
		if err == nil {
			res, err = readForTransition(rows, v.no, !s.m.claims)
			changed = err == nil
			if errors.Is(err, sql.ErrNoRows) {
				return cancel.Result{}, false, nil
			}
		}
		if err == nil || !retryable(err) || ctx.Err() != nil || attempt == maxAttempts {
			return res, changed, err
		}
		select {
		case <-ctx.Done():
			return cancel.Result{}, false, err
		case <-time.After(time.Duration(attempt) * time.Millisecond):
		}
	}
}

// readForTransition reads the order, its seats and its lock id from rows of
// (user, show, deadline ms, now ms, seat or NULL, lock id or NULL), and
// closes them; sql.ErrNoRows when there are none. With list, the seat
// column holds the order's seats as a list (a host's table without claims:
// the side table's).
func readForTransition(rows *sql.Rows, orderNo string, list bool) (cancel.Result, error) {
	defer rows.Close()
	res := cancel.Result{Order: expiry.Order{No: orderNo}}
	found := false
	for rows.Next() {
		var expireMS, nowMS int64
		var seat, lockID sql.NullString
		if err := rows.Scan(&res.Order.UserID, &res.Order.ShowID, &expireMS, &nowMS, &seat, &lockID); err != nil {
			return res, err
		}
		unpad(&res.Order.UserID, &res.Order.ShowID, &seat.String)
		res.LockID = lockID.String
		found = true
		res.Order.ExpireAt, res.Order.ReadAt = time.UnixMilli(expireMS), time.UnixMilli(nowMS)
		switch {
		case seat.Valid && list:
			res.Seats = splitSeats(seat.String)
		case seat.Valid:
			res.Seats = append(res.Seats, seat.String)
		}
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	if !found {
		return res, sql.ErrNoRows
	}
	return res, nil
}

const maxAttempts = 4

// retry runs fn in a transaction, again when the database reports a
// serialization failure or a deadlock.
func (s *Store) retry(ctx context.Context, fn func(*sql.Tx) error) error {
	var err error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		err = s.inTx(ctx, fn)
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * time.Millisecond):
		}
	}
	return err
}

func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback() // fn's error is the one to report
		return ctxCause(ctx, err)
	}
	return ctxCause(ctx, tx.Commit())
}

// ctxCause names the context's error when database/sql reports only
// sql.ErrTxDone: a context that ends mid-transaction makes database/sql
// roll the transaction back on its own, and the next statement (or the
// COMMIT) then fails with ErrTxDone, which says nothing about why. Callers
// branch on context.DeadlineExceeded and context.Canceled; nothing was
// committed.
func ctxCause(ctx context.Context, err error) error {
	if err != nil && errors.Is(err, sql.ErrTxDone) && ctx.Err() != nil {
		return fmt.Errorf("%w (the transaction was rolled back: %w)", ctx.Err(), err)
	}
	return err
}

// retryable reports serialization failures and deadlocks.
func retryable(err error) bool {
	if n, ok := mysqlErrorNumber(err); ok {
		return n == myErrCheckRead || n == myErrLockDeadlock || n == myErrLockWaitTimeout
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		code := pg.SQLState()
		return code == "40001" || code == "40P01"
	}
	msg := err.Error() // SQLite (modernc) has no exported code type worth importing
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked")
}

func isDuplicate(err error) bool {
	if n, ok := mysqlErrorNumber(err); ok {
		return n == myErrDupEntry
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		return pg.SQLState() == "23505"
	}
	return strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// Expired returns up to limit numbers of pending orders past their deadline
// by the database's clock, in (deadline, order number) order, strictly after
// cursor ("" starts), and the cursor of the next page ("" when fewer than
// limit were returned). It is a keyset scan of the index on (status,
// deadline, order number) (InnoDB appends a primary key order_no to
// (status, expire_at_ms)): each page is an index range from the cursor,
// whatever precedes it. The cursor is "key|order_no", the key being the
// deadline column's value (epoch milliseconds on the library's schema). It
// implements reconcile.Orders.
func (s *Store) Expired(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	if limit <= 0 {
		return nil, "", nil
	}
	key, no, err := s.parseCursor(cursor)
	if err != nil {
		return nil, "", fmt.Errorf("sqlstore: expired: %w", err)
	}
	st, err := s.prepared(ctx, s.q.expired.sql)
	if err != nil {
		return nil, "", fmt.Errorf("sqlstore: expired: %w", err)
	}
	rows, err := st.QueryContext(ctx, s.args(s.q.expired, vals{key: key, no: no, limit: limit})...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlstore: expired: %w", err)
	}
	defer rows.Close()
	out := make([]string, 0, limit)
	var last string
	for rows.Next() {
		if err := rows.Scan(&no, &last); err != nil {
			return nil, "", fmt.Errorf("sqlstore: expired: %w", err)
		}
		unpad(&no)
		out = append(out, no)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("sqlstore: expired: %w", err)
	}
	if len(out) < limit {
		return out, "", nil
	}
	return out, last + "|" + no, nil
}

// expiredCursor is the cursor of Expired on the library's schema that
// continues after order no, due at expireAt (in milliseconds, as the store
// keeps it). The in-memory fake (cancel/memstore) uses the same form.
func expiredCursor(expireAt time.Time, no string) string {
	return strconv.FormatInt(expireAt.UnixMilli(), 10) + "|" + no
}

// minKey is the key before every deadline, by key kind: integers of the
// epoch types, microseconds since 1970 (floored at 1000-01-01, the least
// MySQL DATETIME) of the MySQL and PostgreSQL time types.
const minMicros = -30610224000000000

var textKeyRE = regexp.MustCompile(`^[0-9 :.TZ+-]{1,40}$`)

// parseCursor returns the (key, order_no) after which a page of Expired
// starts: before every order for "".
func (s *Store) parseCursor(cursor string) (any, string, error) {
	t := s.m.scanCol().Type
	text := textKey(s.dialect, t)
	if cursor == "" {
		switch {
		case text:
			return "", "", nil
		case t == EpochMillis || t == EpochSeconds:
			return int64(math.MinInt64), "", nil
		default:
			return int64(minMicros), "", nil
		}
	}
	keyText, no, ok := strings.Cut(cursor, "|")
	bad := fmt.Errorf("%w: %q is not a cursor of Expired", expiry.ErrInvalidID, cursor)
	if !ok || expiry.ValidateID("order number", no) != nil {
		return nil, "", bad
	}
	if text {
		if !textKeyRE.MatchString(keyText) {
			return nil, "", bad
		}
		return keyText, no, nil
	}
	key, err := strconv.ParseInt(keyText, 10, 64)
	if err != nil {
		return nil, "", bad
	}
	return key, no, nil
}

// parseExpiredCursor returns the (expire_at_ms, order_no) after which a
// page starts on the library's schema: before every order for "".
func parseExpiredCursor(cursor string) (int64, string, error) {
	if cursor == "" {
		return math.MinInt64, "", nil
	}
	msText, no, ok := strings.Cut(cursor, "|")
	ms, err := strconv.ParseInt(msText, 10, 64)
	if !ok || err != nil || expiry.ValidateID("order number", no) != nil {
		return 0, "", fmt.Errorf("%w: %q is not a cursor of Expired", expiry.ErrInvalidID, cursor)
	}
	return ms, no, nil
}

// Overdue returns the number of pending orders whose deadline has passed by
// the database's clock (deadline <= now, the guard of a timeout), and how
// long ago the oldest one's deadline passed (0 when there is none): the
// gauge of expiry messages being lost, since a healthy system cancels each
// order within moments of its deadline. One statement, a range of the
// index the expiry scan uses; it counts every row of the range, so on a
// backlog of n orders it reads n index entries.
func (s *Store) Overdue(ctx context.Context) (n int, oldest time.Duration, err error) {
	st, err := s.prepared(ctx, s.q.overdue.sql)
	if err != nil {
		return 0, 0, fmt.Errorf("sqlstore: overdue: %w", err)
	}
	var minMS sql.NullInt64
	var nowMS int64
	if err := st.QueryRowContext(ctx, s.args(s.q.overdue, vals{})...).Scan(&n, &minMS, &nowMS); err != nil {
		return 0, 0, fmt.Errorf("sqlstore: overdue: %w", err)
	}
	if n > 0 && minMS.Valid && nowMS > minMS.Int64 {
		oldest = time.Duration(nowMS-minMS.Int64) * time.Millisecond
	}
	return n, oldest, nil
}

// maxIn bounds the IN list of one Statuses query.
const maxIn = 500

// Statuses returns the state of each existing order among nos (missing ones
// are absent from the map): its status and the time since its last write
// by the database's clock (whole milliseconds, never negative; the
// resolution of the Mapping's UpdatedAt column, and cancel.AgeUnknown
// without one). Only rows whose number equals a requested one byte for byte
// are kept, so a case-insensitive collation of the host's table cannot
// answer for a case variant (I10). It implements reconcile.Orders.
func (s *Store) Statuses(ctx context.Context, nos []string) (map[string]cancel.OrderState, error) {
	out := make(map[string]cancel.OrderState, len(nos))
	want := make(map[string]bool, len(nos))
	for _, no := range nos {
		want[no] = true
	}
	for len(nos) > 0 {
		chunk := nos[:min(len(nos), maxIn)]
		nos = nos[len(chunk):]
		q := rebind(s.dialect, s.q.statusesPre+"?"+strings.Repeat(", ?", len(chunk)-1)+s.q.statusesPost)
		args := make([]any, len(chunk))
		for i, no := range chunk {
			args[i] = no
		}
		rows, err := s.db.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: statuses: %w", err)
		}
		for rows.Next() {
			var no, key, show string
			var ageMS sql.NullInt64
			var lockID, seats sql.NullString
			if err := rows.Scan(&no, &key, &ageMS, &show, &lockID, &seats); err != nil {
				rows.Close()
				return nil, fmt.Errorf("sqlstore: statuses: %w", err)
			}
			unpad(&no, &show)
			st, err := s.status(key)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("sqlstore: statuses: order %s: %w", no, err)
			}
			age := cancel.AgeUnknown
			if ageMS.Valid {
				age = time.Duration(max(0, ageMS.Int64)) * time.Millisecond
			}
			if want[no] {
				out[no] = cancel.OrderState{Status: st, Age: age, ShowID: show, LockID: lockID.String, Seats: splitSeats(seats.String)}
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("sqlstore: statuses: %w", err)
		}
		if err := s.sideRows(ctx, chunk, func(no, lockID, seats string) {
			if st, ok := out[no]; ok {
				st.LockID, st.Seats = lockID, splitSeats(seats)
				out[no] = st
			}
		}); err != nil {
			return nil, fmt.Errorf("sqlstore: statuses: %w", err)
		}
	}
	return out, nil
}

// sideRows calls found with the seat lock id ("" if none) and the seats
// list the side table keeps for each of nos that has a row, on a host's
// table (the library's keeps them in oe_order: nothing to do). The side
// table's ids are byte-exact (ascii_bin on MySQL), so no case variant
// answers.
func (s *Store) sideRows(ctx context.Context, nos []string, found func(no, lockID, seats string)) error {
	if s.m.defaultSchema || len(nos) == 0 {
		return nil
	}
	q := rebind(s.dialect, "SELECT order_no, lock_id, seats FROM oe_order_side WHERE scope = ? AND order_no IN (?"+strings.Repeat(", ?", len(nos)-1)+")")
	args := make([]any, 0, len(nos)+1)
	args = append(args, s.m.scope)
	for _, no := range nos {
		args = append(args, no)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("side rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var no, seats string
		var lockID sql.NullString
		if err := rows.Scan(&no, &lockID, &seats); err != nil {
			return fmt.Errorf("side rows: %w", err)
		}
		found(no, lockID.String, seats)
	}
	return rows.Err()
}

// unpad removes the trailing spaces of ids read from a host's columns: a
// CHAR(n) column returns them padded on PostgreSQL. An id never contains a
// space (expiry.ValidateID), so they can only be padding.
func unpad(ids ...*string) {
	for _, id := range ids {
		*id = strings.TrimRight(*id, " ")
	}
}

// splitSeats is a seats list as oe_order.seats and oe_order_side.seats keep
// it ("" none).
func splitSeats(list string) []string {
	if list == "" {
		return nil
	}
	return strings.Split(list, ",")
}

// Claims returns up to limit seat claims of pending and paid orders in
// (show, seat) order after the cursor ("" starts; the returned cursor is ""
// when there are no more), following the claims' unique key. It implements
// reconcile.Orders: the reconciler rebuilds the seat store from it.
// Without a claims table in the Mapping there are none.
func (s *Store) Claims(ctx context.Context, cursor string, limit int) ([]cancel.Claim, string, error) {
	if limit <= 0 || !s.m.claims {
		return nil, "", nil
	}
	show, seat, _ := strings.Cut(cursor, "|")
	out, err := s.readClaims(ctx, show, seat, limit)
	if err != nil {
		return nil, "", fmt.Errorf("sqlstore: claims: %w", err)
	}
	// A host's table: each order's lock id is in the side table.
	var nos []string
	at := map[string][]int{}
	for i, c := range out {
		if _, ok := at[c.OrderNo]; !ok {
			nos = append(nos, c.OrderNo)
		}
		at[c.OrderNo] = append(at[c.OrderNo], i)
	}
	for len(nos) > 0 {
		chunk := nos[:min(len(nos), maxIn)]
		nos = nos[len(chunk):]
		if err := s.sideRows(ctx, chunk, func(no, lockID, _ string) {
			for _, i := range at[no] {
				out[i].LockID = lockID
			}
		}); err != nil {
			return nil, "", fmt.Errorf("sqlstore: claims: %w", err)
		}
	}
	if len(out) < limit {
		return out, "", nil
	}
	last := out[len(out)-1]
	return out, last.ShowID + "|" + last.SeatID, nil
}

// readClaims reads one page of Claims.
func (s *Store) readClaims(ctx context.Context, show, seat string, limit int) ([]cancel.Claim, error) {
	rows, err := s.db.QueryContext(ctx, s.q.claims.sql, s.claimsArgs(show, seat, limit)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]cancel.Claim, 0, limit)
	for rows.Next() {
		var c cancel.Claim
		var key string
		var lockID sql.NullString
		if err := rows.Scan(&c.ShowID, &c.SeatID, &c.OrderNo, &c.UserID, &key, &lockID); err != nil {
			return nil, err
		}
		unpad(&c.ShowID, &c.SeatID, &c.OrderNo, &c.UserID)
		c.LockID = lockID.String
		if c.Status, err = s.status(key); err != nil {
			return nil, fmt.Errorf("order %s: %w", c.OrderNo, err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// claimsArgs are the arguments of the claims query for a page of limit
// after (show, seat).
func (s *Store) claimsArgs(show, seat string, limit int) []any {
	num, _ := s.numericShow(show) // the cursor's show came from a numeric column: canonical
	return s.args(s.q.claims, vals{showKey: show, showKeyNum: num, seatKey: seat, limit: limit})
}

// RecordDiscrepancy implements cancel.DiscrepancyStore: it inserts d into
// oe_payment_discrepancy keyed by d.PaymentID, tried now by the database's
// clock. recorded is false, and nothing changes, when the payment id is
// there already (settled or not); the primary key makes one of concurrent
// calls the winner.
func (s *Store) RecordDiscrepancy(ctx context.Context, d cancel.Discrepancy) (bool, error) {
	if err := d.Validate(); err != nil {
		return false, fmt.Errorf("sqlstore: record discrepancy: %w", err)
	}
	st, err := s.prepared(ctx, s.q.recordDiscrepancy)
	if err != nil {
		return false, fmt.Errorf("sqlstore: record discrepancy of payment %s: %w", d.PaymentID, err)
	}
	var recorded bool
	err = s.retry(ctx, func(tx *sql.Tx) error {
		r, err := tx.StmtContext(ctx, st).ExecContext(ctx, d.PaymentID, s.m.scope, d.OrderNo, d.UserID, uint8(d.Status))
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		recorded = n == 1
		return err
	})
	if err != nil && isDuplicate(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sqlstore: record discrepancy of payment %s: %w", d.PaymentID, err)
	}
	return recorded, nil
}

// ClaimDiscrepancies implements cancel.DiscrepancyStore: up to limit
// unsettled discrepancies last tried at least lease ago by the database's
// clock (whole milliseconds, rounded up), least recently tried first, each
// marked tried now by a compare-and-set on its tried_at, so that of
// concurrent claimers exactly one gets each record within a lease. It reads
// the index on (settled_at_ms, tried_at_ms); a record another claimer took
// between the read and the compare-and-set is left out.
func (s *Store) ClaimDiscrepancies(ctx context.Context, lease time.Duration, limit int) ([]cancel.Discrepancy, error) {
	if lease < 0 {
		return nil, fmt.Errorf("sqlstore: claim discrepancies: negative lease %v", lease)
	}
	if limit <= 0 {
		return nil, nil
	}
	due, err := s.prepared(ctx, s.q.dueDiscrepancies)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: claim discrepancies: %w", err)
	}
	claim, err := s.prepared(ctx, s.q.claimDiscrepancy)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: claim discrepancies: %w", err)
	}
	leaseMS := lease.Milliseconds() // rounded up: "at least lease ago"
	if time.Duration(leaseMS)*time.Millisecond < lease {
		leaseMS++
	}
	type candidate struct {
		d       cancel.Discrepancy
		triedMS int64
	}
	var cands []candidate
	rows, err := due.QueryContext(ctx, s.m.scope, leaseMS, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: claim discrepancies: %w", err)
	}
	for rows.Next() {
		var c candidate
		var status uint8
		if err := rows.Scan(&c.d.PaymentID, &c.d.OrderNo, &c.d.UserID, &status, &c.triedMS); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlstore: claim discrepancies: %w", err)
		}
		c.d.Status = expiry.Status(status)
		cands = append(cands, c)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return nil, fmt.Errorf("sqlstore: claim discrepancies: %w", err)
	}
	var out []cancel.Discrepancy
	for _, c := range cands {
		r, err := claim.ExecContext(ctx, c.d.PaymentID, c.triedMS)
		if err != nil {
			if retryable(err) {
				continue // a concurrent claimer holds it: it is theirs
			}
			return out, fmt.Errorf("sqlstore: claim discrepancy of payment %s: %w", c.d.PaymentID, err)
		}
		n, err := r.RowsAffected()
		if err != nil {
			return out, fmt.Errorf("sqlstore: claim discrepancy of payment %s: %w", c.d.PaymentID, err)
		}
		if n == 1 {
			out = append(out, c.d)
		}
	}
	return out, nil
}

// SettleDiscrepancy implements cancel.DiscrepancyStore: it marks the record
// of paymentID settled, so it is never claimed again. Idempotent; a payment
// id never recorded gives an error wrapping expiry.ErrNotFound.
func (s *Store) SettleDiscrepancy(ctx context.Context, paymentID string) error {
	st, err := s.prepared(ctx, s.q.settleDiscrepancy)
	if err != nil {
		return fmt.Errorf("sqlstore: settle discrepancy of payment %s: %w", paymentID, err)
	}
	r, err := st.ExecContext(ctx, paymentID, s.m.scope)
	if err != nil {
		return fmt.Errorf("sqlstore: settle discrepancy of payment %s: %w", paymentID, err)
	}
	if n, err := r.RowsAffected(); err != nil || n == 1 {
		return err
	}
	var n int
	if err := s.db.QueryRowContext(ctx, s.q.discrepancyExists, paymentID, s.m.scope).Scan(&n); err != nil {
		return fmt.Errorf("sqlstore: settle discrepancy of payment %s: %w", paymentID, err)
	}
	if n == 0 {
		return fmt.Errorf("sqlstore: settle discrepancy of payment %s: %w", paymentID, expiry.ErrNotFound)
	}
	return nil // settled before
}
