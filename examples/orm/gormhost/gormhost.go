// Package gormhost places an order and a row of the host's own in one gorm
// transaction, through cancel.Service.Place.
//
// The store runs on the transaction gorm hands the closure:
// tx.Statement.ConnPool (a *sql.Tx, or gorm's prepared-statement
// transaction) is a cancel.Querier. gorm's Transaction returns the
// closure's error and the commit's alike; the host tells them apart by
// whether its closure got to its end, and reports a failed commit wrapping
// expiry.ErrCommitUnknown, so that Place keeps the seats locked.
//
// Place's insert must end with the real commit, since Place sends the
// expiry message once it returned nil: call it on a *gorm.DB that is not
// inside a transaction already, where gorm would make Transaction a
// savepoint whose release commits nothing.
package gormhost

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// Note is the host's own row of an order.
type Note struct {
	OrderNo string `gorm:"column:order_no;primaryKey"`
	Note    string `gorm:"column:note"`
}

// TableName is the host's table of notes.
func (Note) TableName() string { return "order_note" }

// Host is the host's order service.
type Host struct {
	db    *gorm.DB
	svc   *cancel.Service
	store *sqlstore.Store
	// lastStep, nil in a real host, runs last in the transaction; the
	// tests break the connection there, before the commit.
	lastStep func(ctx context.Context, q cancel.Querier) error
}

// New returns a Host placing with svc, whose order store is store, on db.
func New(db *gorm.DB, svc *cancel.Service, store *sqlstore.Store) *Host {
	return &Host{db: db, svc: svc, store: store}
}

// Place places p with its note: the order, its seat claims and the note
// commit together or not at all, and Place schedules the order's expiry once
// they have.
func (h *Host) Place(ctx context.Context, p cancel.Placement, note string) error {
	return h.svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error {
		done := false // the closure got to its end: an error after it is the commit's
		err := h.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := h.store.Place(ctx, tx.Statement.ConnPool, p); err != nil {
				return err
			}
			if err := tx.Create(&Note{OrderNo: p.OrderNo, Note: note}).Error; err != nil {
				return err
			}
			if h.lastStep != nil {
				if err := h.lastStep(ctx, tx.Statement.ConnPool); err != nil {
					return err
				}
			}
			done = true
			return nil
		})
		if err != nil && done {
			return fmt.Errorf("%w: %w", expiry.ErrCommitUnknown, err)
		}
		return err
	})
}
