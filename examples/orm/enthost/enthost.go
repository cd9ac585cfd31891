// Package enthost places an order and a row of the host's own in one ent
// transaction, through cancel.Service.Place.
//
// ent hands out no *sql.Tx; its sql/execquery feature (see ./ent's
// generate.go) gives the generated client and its transaction ExecContext
// and QueryContext, which is all a cancel.Querier is, so the store runs
// on the *ent.Tx itself.
package enthost

import (
	"context"
	"errors"
	"fmt"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/examples/orm/enthost/ent"
	"github.com/seatflow/orderexpiry/expiry"
)

// Host is the host's order service.
type Host struct {
	client *ent.Client
	svc    *cancel.Service
	store  *sqlstore.Store
	// lastStep, nil in a real host, runs last in the transaction; the
	// tests break the connection there, before the commit.
	lastStep func(ctx context.Context, q cancel.Querier) error
}

// New returns a Host placing with svc, whose order store is store, on
// client.
func New(client *ent.Client, svc *cancel.Service, store *sqlstore.Store) *Host {
	return &Host{client: client, svc: svc, store: store}
}

// Place places p with its note: the order, its seat claims and the note
// commit together or not at all, and Place schedules the order's expiry once
// they have.
func (h *Host) Place(ctx context.Context, p cancel.Placement, note string) error {
	return h.svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error {
		tx, err := h.client.Tx(ctx)
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

func (h *Host) inTx(ctx context.Context, tx *ent.Tx, p cancel.Placement, note string) error {
	if err := h.store.Place(ctx, tx, p); err != nil {
		return err
	}
	if err := tx.Note.Create().SetID(p.OrderNo).SetNote(note).Exec(ctx); err != nil {
		return err
	}
	if h.lastStep != nil {
		return h.lastStep(ctx, tx)
	}
	return nil
}
