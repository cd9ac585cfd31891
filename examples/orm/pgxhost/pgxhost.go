// Package pgxhost places an order and a row of the host's own in one pgx
// transaction, through cancel.Service.Place.
//
// The store runs on database/sql. A pgx host opens a *sql.DB on its pool
// with stdlib.OpenDBFromPool, so both draw on the same connections, and
// builds the store on it. To run the store's statements inside a pgx.Tx,
// the host takes one connection of that *sql.DB (a *sql.Conn, its own until
// Close), begins the pgx transaction on the *pgx.Conn underneath it
// (Conn.Raw), and hands the store the *sql.Conn: a cancel.Querier whose
// statements go to the same session, so into the same transaction. The
// pgx.Tx is used after Raw returned, which database/sql does not promise
// to allow; it holds because the *sql.Conn keeps the connection to this
// goroutine until Close, and pgxhost's test checks that both see one
// transaction id. A host with no pgx.Tx of its own needs none of this: on
// the *sql.DB, Store.Insert runs the whole transaction.
package pgxhost

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// Host is the host's order service.
type Host struct {
	db    *sql.DB
	svc   *cancel.Service
	store *sqlstore.Store
	// lastStep, nil in a real host, runs last in the transaction; the
	// tests break the connection there, before the commit.
	lastStep func(ctx context.Context, q cancel.Querier) error
}

// New returns a Host placing with svc, whose order store is store, on db,
// a *sql.DB of the host's pgx pool (stdlib.OpenDBFromPool).
func New(db *sql.DB, svc *cancel.Service, store *sqlstore.Store) *Host {
	return &Host{db: db, svc: svc, store: store}
}

// Place places p with its note: the order, its seat claims and the note
// commit together or not at all, and Place schedules the order's expiry once
// they have.
func (h *Host) Place(ctx context.Context, p cancel.Placement, note string) error {
	return h.svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error {
		return h.inTx(ctx, func(conn *sql.Conn, tx pgx.Tx) error {
			if err := h.store.Place(ctx, conn, p); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "INSERT INTO order_note (order_no, note) VALUES ($1, $2)", p.OrderNo, note); err != nil {
				return err
			}
			if h.lastStep != nil {
				return h.lastStep(ctx, conn)
			}
			return nil
		})
	})
}

// inTx runs fn in a pgx transaction; conn is the same session, for the
// store. It commits if fn returns nil, and reports a failed commit wrapping
// expiry.ErrCommitUnknown.
func (h *Host) inTx(ctx context.Context, fn func(conn *sql.Conn, tx pgx.Tx) error) error {
	conn, err := h.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close() // back to the pool; a connection left in a transaction is discarded
	var tx pgx.Tx
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("pgxhost: %T is no pgx connection (open the *sql.DB with stdlib.OpenDBFromPool)", dc)
		}
		var err error
		tx, err = c.Conn().Begin(ctx)
		return err
	})
	if err != nil {
		return err
	}
	if err := fn(conn, tx); err != nil {
		return errors.Join(err, tx.Rollback(ctx))
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("%w: %w", expiry.ErrCommitUnknown, err)
	}
	return nil
}
