// Package sqlxhost places an order and a row of the host's own in one sqlx
// transaction, through cancel.Service.Place.
//
// *sqlx.Tx embeds the *sql.Tx, so it is a cancel.Querier as it is.
package sqlxhost

import (
	"context"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// Note is the host's own row of an order.
type Note struct {
	OrderNo string `db:"order_no"`
	Note    string `db:"note"`
}

// Host is the host's order service.
type Host struct {
	db    *sqlx.DB
	svc   *cancel.Service
	store *sqlstore.Store
	// lastStep, nil in a real host, runs last in the transaction; the
	// tests break the connection there, before the commit.
	lastStep func(ctx context.Context, q cancel.Querier) error
}

// New returns a Host placing with svc, whose order store is store, on db.
func New(db *sqlx.DB, svc *cancel.Service, store *sqlstore.Store) *Host {
	return &Host{db: db, svc: svc, store: store}
}

// Place places p with its note: the order, its seat claims and the note
// commit together or not at all, and Place schedules the order's expiry once
// they have.
func (h *Host) Place(ctx context.Context, p cancel.Placement, note string) error {
	return h.svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error {
		tx, err := h.db.BeginTxx(ctx, nil)
		if err != nil {
			return err
		}
		if err := h.inTx(ctx, tx, p, note); err != nil {
			return errors.Join(err, tx.Rollback())
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("%w: %w", expiry.ErrCommitUnknown, err)
		}
		return nil
	})
}

func (h *Host) inTx(ctx context.Context, tx *sqlx.Tx, p cancel.Placement, note string) error {
	if err := h.store.Place(ctx, tx, p); err != nil {
		return err
	}
	if _, err := tx.NamedExecContext(ctx, "INSERT INTO order_note (order_no, note) VALUES (:order_no, :note)", Note{OrderNo: p.OrderNo, Note: note}); err != nil {
		return err
	}
	if h.lastStep != nil {
		return h.lastStep(ctx, tx)
	}
	return nil
}
