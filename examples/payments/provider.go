package main

// This file is the host's adapter: cancel.PaymentProvider on top of the
// provider's API (checkout.go), with the host's own record of which session
// it opened for which order, payment_session, in the same database as the
// orders.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// paymentSessionDDL is the host's migration: one row per order whose buyer
// went to pay, session_id NULL while the session is being opened, or
// barredSession once the library closed the order's payment before any
// session was opened. The same statement runs on MySQL/MariaDB, PostgreSQL
// and SQLite.
const paymentSessionDDL = `CREATE TABLE IF NOT EXISTS payment_session (
	order_no   VARCHAR(64)  NOT NULL PRIMARY KEY,
	session_id VARCHAR(255) NULL
)`

// Payments is the host's side of the provider: it opens checkout sessions
// for orders and is the library's cancel.PaymentProvider.
type Payments struct {
	db      *sql.DB
	dialect sqlstore.Dialect
	api     *Checkout
	// pending reports whether an order may still be paid: the host's read
	// of its order (here cancel.OrderStore.Order).
	pending func(ctx context.Context, orderNo string) (bool, error)
}

var _ cancel.PaymentProvider = (*Payments)(nil)

// NewPayments returns the adapter and runs the host's migration.
func NewPayments(ctx context.Context, db *sql.DB, d sqlstore.Dialect, api *Checkout, pending func(context.Context, string) (bool, error)) (*Payments, error) {
	if _, err := db.ExecContext(ctx, paymentSessionDDL); err != nil {
		return nil, fmt.Errorf("payments: migrate payment_session: %w", err)
	}
	return &Payments{db: db, dialect: d, api: api, pending: pending}, nil
}

// barredSession is the session_id of an order whose payment the library
// closed before its buyer opened a session: ClosePayment's contract bars
// the order for good, since the cancel commits after the close and a
// session opened in between would outlive the order.
const barredSession = "-barred-"

// ErrNotPayable: the order is no longer pending, so no session is opened
// (or the one just opened is expired again).
var ErrNotPayable = errors.New("payments: the order can no longer be paid")

// Open is the buyer's "pay" button: it opens a checkout session for a
// pending order and returns it (the host redirects the buyer to its page).
// The order is recorded first, session unknown, so that a due order whose
// session is being opened waits (QueryPayment answers open) instead of
// being cancelled under a session its close cannot see; once the session
// id is recorded, the order is read again, and a session opened for an
// order cancelled meanwhile is expired before its buyer sees it. A crash
// between the provider's answer and the update leaves the row without a
// session: that order waits up to its maximum hold, and the buyer never
// got the page (its session expires at its expires_at).
//
// One session per order: a second Open of the order answers the session
// it has.
func (p *Payments) Open(ctx context.Context, orderNo string, amount int64, ttl time.Duration) (Session, error) {
	ok, err := p.pending(ctx, orderNo)
	if err != nil {
		return Session{}, err
	}
	if !ok {
		return Session{}, ErrNotPayable
	}
	if _, err := p.db.ExecContext(ctx, p.rebind(`INSERT INTO payment_session (order_no, session_id) VALUES (?, NULL)`), orderNo); err != nil {
		id, found, rerr := p.sessionOf(ctx, orderNo)
		switch {
		case rerr == nil && id == barredSession:
			return Session{}, ErrNotPayable // closed by the library: about to be cancelled
		case rerr != nil || !found || id == "":
			return Session{}, fmt.Errorf("payments: record the session of %s: %w", orderNo, err)
		}
		return p.api.Retrieve(ctx, id)
	}
	s, err := p.api.CreateSession(ctx, orderNo, amount, ttl)
	if err != nil {
		return Session{}, err
	}
	if _, err := p.db.ExecContext(ctx, p.rebind(`UPDATE payment_session SET session_id = ? WHERE order_no = ?`), s.ID, orderNo); err != nil {
		// The buyer never gets it: expire it, best effort (it expires at
		// its expires_at anyway).
		if _, xerr := p.api.Expire(context.WithoutCancel(ctx), s.ID); xerr != nil {
			err = errors.Join(err, xerr)
		}
		return Session{}, fmt.Errorf("payments: record session %s of %s: %w", s.ID, orderNo, err)
	}
	if ok, err := p.pending(ctx, orderNo); err != nil || !ok {
		if _, xerr := p.api.Expire(context.WithoutCancel(ctx), s.ID); xerr != nil && !InvalidRequest(xerr) {
			err = errors.Join(err, xerr)
		}
		return Session{}, errors.Join(ErrNotPayable, err)
	}
	return s, nil
}

// sessionOf reads the host's record of the order's session: found false
// when the buyer never went to pay, id "" while it is being opened.
func (p *Payments) sessionOf(ctx context.Context, orderNo string) (id string, found bool, err error) {
	var sid sql.NullString
	err = p.db.QueryRowContext(ctx, p.rebind(`SELECT session_id FROM payment_session WHERE order_no = ?`), orderNo).Scan(&sid)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("payments: read the session of %s: %w", orderNo, err)
	}
	return sid.String, true, nil
}

// SessionOf is sessionOf for the demo's report: "" for an order that never
// had a session.
func (p *Payments) SessionOf(ctx context.Context, orderNo string) (string, error) {
	id, _, err := p.sessionOf(ctx, orderNo)
	if id == barredSession {
		id = ""
	}
	return id, err
}

// answer maps a session to the library's answer. complete and paid: the
// payment intent, the id the checkout.session.completed webhook carries
// too, so the callback and this answer pay the order once; complete and
// unpaid (a delayed payment method still processing) and open: the buyer
// is paying; expired: nobody can pay it any more.
func answer(s Session) (cancel.PaymentAnswer, error) {
	switch {
	case s.Status == StatusComplete && s.PaymentStatus == PaymentPaid:
		return cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: s.PaymentIntent}, nil
	case s.Status == StatusComplete, s.Status == StatusOpen:
		return cancel.PaymentAnswer{State: cancel.PaymentOpen}, nil
	case s.Status == StatusExpired:
		return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
	}
	return cancel.PaymentAnswer{}, fmt.Errorf("payments: session %s has status %q", s.ID, s.Status)
}

// QueryPayment implements cancel.PaymentProvider: "Retrieve a Session" of
// the session the host opened for o; not paid at once, without a call,
// for an order whose buyer never went to pay.
func (p *Payments) QueryPayment(ctx context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	id, found, err := p.sessionOf(ctx, o.No)
	switch {
	case err != nil:
		return cancel.PaymentAnswer{}, err
	case !found, id == barredSession:
		return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
	case id == "":
		return cancel.PaymentAnswer{State: cancel.PaymentOpen}, nil // being opened: wait
	}
	s, err := p.api.Retrieve(ctx, id)
	if err != nil {
		return cancel.PaymentAnswer{}, err
	}
	return answer(s)
}

// ClosePayment implements cancel.PaymentProvider: "Expire a Session". The
// API refuses a session that is not open; the adapter then retrieves it
// and answers by its status, not by the error's wording: complete, paid
// with its payment intent (the buyer paid between the query and the
// close); expired, not paid (expired before, by the host or at its
// expires_at: closing again is a no-op, as the library requires).
func (p *Payments) ClosePayment(ctx context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	id, found, err := p.sessionOf(ctx, o.No)
	switch {
	case err != nil:
		return cancel.PaymentAnswer{}, err
	case !found:
		// No session yet: bar the order, so that Open refuses it from now
		// on (the cancel commits after this close). A concurrent Open's
		// row, inserted first, makes this insert fail: unknown, the order
		// waits and is asked again.
		if _, err := p.db.ExecContext(ctx, p.rebind(`INSERT INTO payment_session (order_no, session_id) VALUES (?, ?)`), o.No, barredSession); err != nil {
			return cancel.PaymentAnswer{}, fmt.Errorf("payments: bar %s: %w", o.No, err)
		}
		return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
	case id == barredSession:
		return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
	case id == "":
		return cancel.PaymentAnswer{State: cancel.PaymentOpen}, nil // cannot close what it cannot name yet
	}
	s, err := p.api.Expire(ctx, id)
	if err == nil {
		return answer(s)
	}
	if !InvalidRequest(err) {
		return cancel.PaymentAnswer{}, err // no answer, a 5xx: unknown, the order waits
	}
	if s, err = p.api.Retrieve(ctx, id); err != nil {
		return cancel.PaymentAnswer{}, err
	}
	if s.Status == StatusOpen {
		return cancel.PaymentAnswer{}, fmt.Errorf("payments: session %s refused to expire but is open", id)
	}
	return answer(s)
}

// rebind turns ? into $n on PostgreSQL.
func (p *Payments) rebind(q string) string {
	if p.dialect != sqlstore.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
