package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/seatflow/orderexpiry/expiry"
)

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
// missing (rows recorded before it are the library's schema's, scope ""),
// makes (scope, payment_id) its primary key where it was payment_id alone
// (payment ids are per scope: see RecordDiscrepancy), and moves the
// records of a mapping's Orders.PreviousScopes to its scope.
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
	if err := s.upgradeDiscrepancyKey(ctx); err != nil {
		return fmt.Errorf("sqlstore: migrate: upgrade: %w", err)
	}
	for _, q := range onScope {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sqlstore: migrate: %w", err)
		}
	}
	if err := s.movePreviousScopes(ctx); err != nil {
		return fmt.Errorf("sqlstore: migrate: upgrade: %w", err)
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

// movePreviousScopes moves the payment records of the scopes listed in
// Orders.PreviousScopes to this store's scope (Migrate): those of this
// store's orders (ownsRecord), so that a scope several stores share (""
// before the library kept scopes, a single-tenant store's become several
// tenants') gives each its own, and one listed by mistake gives nothing
// away. A record of an order deleted since stays where it was. A payment
// id this scope decided already keeps its own record. Each row moves at most once (the UPDATE names its old
// scope), so several stores may run it at once.
func (s *Store) movePreviousScopes(ctx context.Context) error {
	upd := rebind(s.dialect, "UPDATE oe_payment_discrepancy SET scope = ? WHERE scope = ? AND payment_id = ?")
	for _, from := range s.m.previousScopes {
		err := s.eachRecord(ctx, from, func(r record) error {
			// Only the records of this store's orders: a scope listed by
			// mistake (or one several stores share, as a single-tenant
			// store's becoming several tenants') gives each store its own.
			own, err := s.ownsRecord(ctx, r)
			if err != nil || !own {
				return err
			}
			payment := r.payment
			if _, err := s.db.ExecContext(ctx, upd, s.m.scope, from, payment); err != nil && !isDuplicate(err) {
				return fmt.Errorf("move payment record %s from scope %q to %q: %w", payment, from, s.m.scope, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// record is a payment record: its payment id, its order's number and
// buyer, and its status (0: the payment paid the order; else the order's
// status when the payment was refunded).
type record struct {
	payment, no, user string
	status            int
}

// ownsRecord says whether r is of one of this store's orders: the number
// and the buyer match, and the order fits the record (paid by that payment
// for a record of a payment that paid; decided, and not paid by it, for a
// refund's). Two tenants' orders of one number and buyer (per-tenant
// sequences) seldom also share a fate.
func (s *Store) ownsRecord(ctx context.Context, r record) (bool, error) {
	o, paidBy, err := s.orderRow(ctx, r.no)
	switch {
	case errors.Is(err, expiry.ErrNotFound) || errors.Is(err, expiry.ErrInvalidID):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("order %s of payment record %s: %w", r.no, r.payment, err)
	case o.UserID != r.user:
		return false, nil
	case r.status == 0:
		return o.Status == expiry.StatusPaid && (paidBy == "" || paidBy == r.payment), nil
	}
	return o.Status != expiry.StatusPending && !(o.Status == expiry.StatusPaid && paidBy == r.payment), nil
}

// eachRecord calls fn with every payment record of scope, in pages by
// payment id.
func (s *Store) eachRecord(ctx context.Context, scope string, fn func(r record) error) error {
	const page = 500
	sel := rebind(s.dialect, "SELECT payment_id, order_no, user_id, status FROM oe_payment_discrepancy WHERE scope = ? AND payment_id > ? ORDER BY payment_id LIMIT 500")
	for after := ""; ; {
		rows, err := s.db.QueryContext(ctx, sel, scope, after)
		if err != nil {
			return fmt.Errorf("read payment records of scope %q: %w", scope, err)
		}
		var recs []record
		for rows.Next() {
			var r record
			if err := rows.Scan(&r.payment, &r.no, &r.user, &r.status); err != nil {
				rows.Close()
				return fmt.Errorf("read payment records of scope %q: %w", scope, err)
			}
			recs = append(recs, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read payment records of scope %q: %w", scope, err)
		}
		for _, r := range recs {
			if err := fn(r); err != nil {
				return err
			}
		}
		if len(recs) < page {
			return nil
		}
		after = recs[len(recs)-1].payment
	}
}

// discrepancyKeyColumns counts the columns of oe_payment_discrepancy's
// primary key: 1 in versions before payment ids were per scope, 2 now.
func (s *Store) discrepancyKeyColumns(ctx context.Context) (int, error) {
	var q string
	switch s.dialect {
	case MySQL:
		q = "SELECT COUNT(*) FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'oe_payment_discrepancy' AND CONSTRAINT_NAME = 'PRIMARY'"
	case Postgres:
		q = "SELECT COUNT(*) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'oe_payment_discrepancy'::regclass AND i.indisprimary"
	default:
		q = "SELECT COUNT(*) FROM pragma_table_info('oe_payment_discrepancy') WHERE pk > 0"
	}
	var n int
	if err := s.db.QueryRowContext(ctx, q).Scan(&n); err != nil {
		return 0, fmt.Errorf("primary key of oe_payment_discrepancy: %w", err)
	}
	return n, nil
}

// upgradeDiscrepancyKey makes (scope, payment_id) the primary key of an
// oe_payment_discrepancy whose key is payment_id alone (Migrate, on every
// store). Rows keep their scope; no two rows of the old key can collide in
// the new one. SQLite cannot change a key in place: the table is copied
// into a new one, in one transaction.
func (s *Store) upgradeDiscrepancyKey(ctx context.Context) error {
	n, err := s.discrepancyKeyColumns(ctx)
	if err != nil || n != 1 {
		return err
	}
	switch s.dialect {
	case MySQL:
		_, err = s.db.ExecContext(ctx, "ALTER TABLE oe_payment_discrepancy DROP PRIMARY KEY, ADD PRIMARY KEY (scope, payment_id)")
	case Postgres:
		var name string
		if err := s.db.QueryRowContext(ctx, "SELECT conname FROM pg_constraint WHERE conrelid = 'oe_payment_discrepancy'::regclass AND contype = 'p'").Scan(&name); err != nil {
			return fmt.Errorf("primary key of oe_payment_discrepancy: %w", err)
		}
		q, err := ident(Postgres, "primary key of oe_payment_discrepancy", name, false)
		if err != nil {
			return err
		}
		_, err = s.db.ExecContext(ctx, "ALTER TABLE oe_payment_discrepancy DROP CONSTRAINT "+q+", ADD PRIMARY KEY (scope, payment_id)")
	default:
		err = s.rebuildDiscrepancySQLite(ctx)
	}
	if err != nil {
		// A concurrent Migrate may have upgraded it first.
		if n, cerr := s.discrepancyKeyColumns(ctx); cerr == nil && n == 2 {
			return nil
		}
		return fmt.Errorf("oe_payment_discrepancy: key by scope and payment id: %w", err)
	}
	return nil
}

// rebuildDiscrepancySQLite is upgradeDiscrepancyKey on SQLite.
func (s *Store) rebuildDiscrepancySQLite(ctx context.Context) error {
	stmts, err := Schema(SQLite)
	if err != nil {
		return err
	}
	var create string
	for _, q := range stmts {
		if strings.HasPrefix(q, "CREATE TABLE IF NOT EXISTS oe_payment_discrepancy ") {
			create = strings.Replace(q, "oe_payment_discrepancy", "oe_payment_discrepancy_rekeyed", 1)
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM pragma_table_info('oe_payment_discrepancy') WHERE pk > 0").Scan(&n); err != nil || n != 1 {
		return err // upgraded meanwhile
	}
	const cols = "payment_id, scope, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms"
	for _, q := range []string{
		"DROP TABLE IF EXISTS oe_payment_discrepancy_rekeyed",
		create,
		"INSERT INTO oe_payment_discrepancy_rekeyed (" + cols + ") SELECT " + cols + " FROM oe_payment_discrepancy",
		"DROP TABLE oe_payment_discrepancy",
		"ALTER TABLE oe_payment_discrepancy_rekeyed RENAME TO oe_payment_discrepancy",
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
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
