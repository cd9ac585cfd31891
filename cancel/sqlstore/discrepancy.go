package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// RecordDiscrepancy implements cancel.OrderStore: it inserts d into
// oe_payment_discrepancy keyed by the store's scope and d.PaymentID, tried
// now by the database's clock. recorded is false, and nothing changes, when
// the payment id is there already in this scope (settled or not); the
// primary key makes one of concurrent calls the winner. Another scope's
// record of the same id is another payment (another tenant's provider
// account), and does not answer for this one.
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
		r, err := tx.StmtContext(ctx, st).ExecContext(ctx, d.PaymentID, s.m.scope, d.OrderNo, d.UserID, statusCode(d.Status))
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

// refundedPending is the status column's code of a refund recorded for an
// order read pending (SQL went back in time, or the host reopened it:
// cancel's refusedBefore and payLate): never 0, which is a payment's
// decision row alone (honoured), so that every read of "the payment that
// paid" (paidGone, an order's payment without a payment column, Check's
// and Migrate's fates) never takes a refund for it.
const refundedPending = 4

// statusCode is the status column's code of a discrepancy's Status.
func statusCode(st expiry.Status) uint8 {
	if st == expiry.StatusPending {
		return refundedPending
	}
	return uint8(st)
}

// statusOfCode is statusCode's inverse.
func statusOfCode(code uint8) expiry.Status {
	if code == refundedPending {
		return expiry.StatusPending
	}
	return expiry.Status(code)
}

// ClaimDiscrepancies implements cancel.OrderStore: up to limit
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
		c.d.Status = statusOfCode(status)
		cands = append(cands, c)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return nil, fmt.Errorf("sqlstore: claim discrepancies: %w", err)
	}
	var out []cancel.Discrepancy
	for _, c := range cands {
		r, err := claim.ExecContext(ctx, c.d.PaymentID, s.m.scope, c.triedMS)
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

// SettleDiscrepancy implements cancel.OrderStore: it marks the record
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
