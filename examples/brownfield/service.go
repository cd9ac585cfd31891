package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/inproc"
	"github.com/seatflow/orderexpiry/levels"
	"github.com/seatflow/orderexpiry/reconcile"
)

// Service is the existing order service with the library wired onto its
// own tables: it inserts its orders itself (with the columns only it
// knows), and the library expires, cancels and pays them.
type Service struct {
	db      *sql.DB
	dialect sqlstore.Dialect
	store   *sqlstore.Store
	svc     *cancel.Service
	rec     *reconcile.Reconciler
	sender  *inproc.Sender
	limit   int

	mu      sync.Mutex
	refunds []string
}

// Config is the service's infrastructure.
type Config struct {
	DB        *sql.DB
	Dialect   sqlstore.Dialect
	Redis     redis.UniversalClient
	Namespace string // the Redis key namespace of the seat store
	Logger    *slog.Logger
}

// Open migrates the service's schema (its own migrations, then the
// library's one table), wires the library on it and checks the mapping
// against the live tables.
func Open(ctx context.Context, c Config) (*Service, error) {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := migrate(ctx, c.DB, c.Dialect); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	store, err := sqlstore.New(c.DB, c.Dialect, mapping)
	if err != nil {
		return nil, err
	}
	// Migrate creates only oe_payment_discrepancy (refunds owed once per
	// payment id); Check names anything of the mapping the tables lack.
	if err := errors.Join(store.Migrate(ctx), store.Check(ctx)); err != nil {
		return nil, err
	}
	root, err := redisseat.New(c.Redis, c.Namespace)
	if err != nil {
		return nil, err
	}
	// The seats of this store's scope (its table): another service on its
	// own tables, or another tenant, never shares a key with this one.
	seats := root.Scoped(store.Scope())
	s := &Service{db: c.DB, dialect: c.Dialect, store: store, limit: 6}
	// A short level table so that orders due in seconds re-arm as on a broker.
	s.sender = inproc.New(inproc.Config{Levels: levels.MustParse("1s 2s 3s"), Slack: 300 * time.Millisecond})
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: s.sender, Runtime: expiry.Runtime{Logger: c.Logger}})
	if err != nil {
		return nil, err
	}
	s.svc, err = cancel.New(cancel.Config{Store: store, Seats: seats, Scheduler: sched, OnDiscrepancy: s.refund, Runtime: expiry.Runtime{Logger: c.Logger}})
	if err != nil {
		return nil, err
	}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: s.svc, Sender: s.sender, Runtime: expiry.Runtime{Logger: c.Logger}})
	if err != nil {
		return nil, err
	}
	if s.rec, err = reconcile.New(reconcile.Config{Orders: store, Seats: seats, Service: s.svc, Runtime: expiry.Runtime{Logger: c.Logger}}); err != nil {
		return nil, err
	}
	s.sender.Attach(expiry.NewShell(h))
	return s, nil
}

// Close stops the timers and releases the store's statements.
func (s *Service) Close() error { return errors.Join(s.sender.Close(), s.store.Close()) }

func (s *Service) refund(_ context.Context, d cancel.Discrepancy) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refunds = append(s.refunds, d.PaymentID)
	return nil
}

// rebind turns ? into $n on PostgreSQL.
func (s *Service) rebind(q string) string {
	if s.dialect != sqlstore.Postgres {
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

// ts is the placeholder of a time written as text.
func (s *Service) ts() string {
	if s.dialect == sqlstore.Postgres {
		return "CAST(? AS TIMESTAMP)"
	}
	return "?"
}

// utc is how this service writes a time into its DATETIME/TEXT columns:
// UTC wall time (rounded up to the second for the deadline: the column has
// no fraction).
func utc(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") }

// Order is an order as the service places it.
type Order struct {
	No, User, Show string
	Seats          []string
	AmountCents    int
	Channel        string
	Remark         string
}

// Place places o, due in window: the library locks the seats in Redis
// within the purchase limit, then one transaction holds this service's own
// order_info row (with its own columns, which the mapping marks
// HostWrites) and the library's rows: the order_seat claims and the side
// row that keeps the order's seats and lock, so the order is the library's
// as much as one it inserted. Place sends the expiry message after the
// commit.
func (s *Service) Place(ctx context.Context, o Order, window time.Duration) error {
	now, err := s.store.Now(ctx) // the database's clock, as the guard uses
	if err != nil {
		return err
	}
	due := now.Add(window).Truncate(time.Second).Add(time.Second) // the column holds whole seconds: round up
	p := cancel.Placement{OrderNo: o.No, UserID: o.User, ShowID: o.Show, Seats: o.Seats, ExpireAt: due, Limit: s.limit}
	return s.svc.Place(ctx, p, s.store.Insert(s.db, func(ctx context.Context, tx *sql.Tx, _ cancel.Placement) error {
		return s.insert(ctx, tx, o, due, now)
	}))
}

// insert writes the order in this service's own table, in tx.
func (s *Service) insert(ctx context.Context, tx *sql.Tx, o Order, due, now time.Time) error {
	_, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO order_info (order_no, user_id, show_id, status, expire_time, amount_cents, create_time, channel, remark)
		VALUES (?, ?, ?, 0, `+s.ts()+`, ?, `+s.ts()+`, ?, ?)`), o.No, o.User, o.Show, utc(due), o.AmountCents, utc(now), o.Channel, o.Remark)
	return err
}

// Pay is the payment provider's callback.
func (s *Service) Pay(ctx context.Context, orderNo, paymentID string) (cancel.Result, error) {
	return s.svc.Pay(ctx, cancel.Payment{OrderNo: orderNo, PaymentID: paymentID})
}

// Archive is the service's own clean-up of a closed order: its rows are
// deleted (moved to an archive elsewhere).
func (s *Service) Archive(ctx context.Context, no string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, q := range []string{"DELETE FROM order_seat WHERE order_no = ?", "DELETE FROM order_info WHERE order_no = ? AND status <> 0"} {
		if _, err := tx.ExecContext(ctx, s.rebind(q), no); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Cancel is the user's cancel.
func (s *Service) Cancel(ctx context.Context, orderNo, userID string) (cancel.Result, error) {
	return s.svc.UserCancel(ctx, orderNo, userID)
}

// Reconcile runs one reconcile round (the service runs rec.Run on every
// instance).
func (s *Service) Reconcile(ctx context.Context) error {
	_, err := s.rec.Round(ctx)
	return err
}

// Overdue feeds the service's "overdue pending orders" gauge.
func (s *Service) Overdue(ctx context.Context) (int, time.Duration, error) {
	return s.store.Overdue(ctx)
}

// Row is an order_info row as the service reads it, its own columns too.
type Row struct {
	Status       int
	AmountCents  int
	Channel      string
	Remark       sql.NullString
	CancelReason sql.NullString
	PayNo        sql.NullString
	Seats        int
}

// Row reads order no.
func (s *Service) Row(ctx context.Context, no string) (Row, error) {
	var r Row
	err := s.db.QueryRowContext(ctx, s.rebind("SELECT status, amount_cents, channel, remark, cancel_reason, pay_no FROM order_info WHERE order_no = ?"), no).
		Scan(&r.Status, &r.AmountCents, &r.Channel, &r.Remark, &r.CancelReason, &r.PayNo)
	if err != nil {
		return r, err
	}
	err = s.db.QueryRowContext(ctx, s.rebind("SELECT COUNT(*) FROM order_seat WHERE order_no = ?"), no).Scan(&r.Seats)
	return r, err
}
