// Package sqlhost places an order and a row of the host's own in one
// database/sql transaction, with the store's own transaction function,
// sqlstore.Store.Insert, whose callback gets the *sql.Tx: the baseline the
// other hosts of examples/orm are measured against.
package sqlhost

import (
	"context"
	"database/sql"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

// Host is the host's order service.
type Host struct {
	db    *sql.DB
	svc   *cancel.Service
	store *sqlstore.Store
	// lastStep, nil in a real host, runs last in the transaction; the
	// tests break the connection there, before the commit.
	lastStep   func(ctx context.Context, q cancel.Querier) error
	insertNote string
}

// New returns a Host placing with svc, whose order store is store, on db;
// postgres selects $n placeholders for the host's own statement.
func New(db *sql.DB, svc *cancel.Service, store *sqlstore.Store, postgres bool) *Host {
	h := &Host{db: db, svc: svc, store: store, insertNote: "INSERT INTO order_note (order_no, note) VALUES (?, ?)"}
	if postgres {
		h.insertNote = "INSERT INTO order_note (order_no, note) VALUES ($1, $2)"
	}
	return h
}

// Place places p with its note: the order, its seat claims and the note
// commit together or not at all, and Place schedules the order's expiry once
// they have.
func (h *Host) Place(ctx context.Context, p cancel.Placement, note string) error {
	return h.svc.Place(ctx, p, h.store.Insert(h.db, func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
		if _, err := tx.ExecContext(ctx, h.insertNote, p.OrderNo, note); err != nil {
			return err
		}
		if h.lastStep != nil {
			return h.lastStep(ctx, tx)
		}
		return nil
	}))
}
