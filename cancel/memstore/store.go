// Package memstore has in-memory implementations of the order store (Store:
// cancel/sqlstore's semantics) and the seat store (Seats: cancel/redisseat's),
// for tests: the library's own, and a host's tests of code that wires the
// library (see the examples of package cancel and reconcile). They pass the
// same conformance suites (cancel/canceltest) as the SQL and Redis adapters,
// so they cannot drift from them. They keep everything in memory and forget
// it with the process: never use them to serve orders.
//
// # Names
//
// Store, NewStore, NewScopedStore (a tenant's rows, as a mapping's Where
// gives), Seats and NewSeats: the two fakes. Their methods implement the
// interfaces of packages cancel and reconcile; the few beyond them (Now,
// Wipe, WipeShow, Snapshot) let a test read the fake's clock, lose its data
// or check its state, and two (DeleteOrder, HoldRow) let a test play the
// host's own part on its rows.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

type order struct {
	o         expiry.Order
	seats     []string
	reason    cancel.Reason
	paymentID string // the payment that paid it
	// placed are the seats it was placed with, kept after a cancel (sqlstore's
	// oe_order.seats), so that a late payment can reinstate it.
	placed []string
	limit  int // the purchase limit it was placed with (sqlstore's seat_limit)
	// created is its placement by the store's clock (sqlstore's
	// created_at_ms): the maximum hold is measured from it.
	created time.Time
	warned  bool   // its expiry warning fired (sqlstore's warned_at_ms)
	lockID  string // the seat lock it holds (sqlstore's lock_id)
	// written is its last write by the store's clock (sqlstore's
	// updated_at_ms): Statuses answers its age.
	written time.Time
}

// discrepancy is one row of sqlstore's oe_payment_discrepancy; times are
// epoch milliseconds of the store's clock, as there.
type discrepancy struct {
	d                   cancel.Discrepancy
	recordedMS, triedMS int64
	settled             bool
	honoured            bool // the payment paid (or reinstated) d.OrderNo: a decision, not a refund
}

// Store is an in-memory order store (cancel.OrderStore), with the same
// behaviour as sqlstore's Store (both pass cancel/canceltest's RunStore). Ids compare
// byte for byte, as there. Safe for concurrent use.
type Store struct {
	mu     sync.Mutex
	now    func() time.Time
	scope  string
	orders map[string]*order
	claims map[[2]string]string // (show, seat) → order, like oe_order_seat's key
	disc   map[string]*discrepancy
	// held counts the host's holds of each order's row (HoldRow).
	held map[string]int
	// Fail, when set, is returned by every call whose name it is given
	// ("Order", "CancelPending", "PayPending", "Expired", "Statuses",
	// "Claims", "Place", "RecordDiscrepancy", "ClaimDiscrepancies",
	// "SettleDiscrepancy", "Overdue", "ReinstateCancelled", "SetDeadline",
	// "MarkWarned", "CancelDue"), to inject store failures.
	Fail func(op string) error
	hook cancel.Hook // SetHook's
}

// SetHook makes every later transition (CancelPending, PayPending) run h,
// as sqlstore's Store.SetHook does, once the order matched and before
// anything changes: an error changes nothing and is returned wrapping
// cancel.ErrHook. The store has no transaction, so h gets a nil tx, and
// runs holding the store's lock: it must not call the store. nil removes it.
func (s *Store) SetHook(h cancel.Hook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = h
}

// NewStore returns an empty store whose clock is now (nil: time.Now).
func NewStore(now func() time.Time) *Store {
	return NewScopedStore(now, "")
}

// NewScopedStore returns an empty store that serves scope, as a
// sqlstore.Store with a Mapping's Where serves one tenant's rows: its Scope
// is scope, and cancel.New and reconcile.New wire it only to a seat store of
// the same scope (memstore.Seats.Scoped).
func NewScopedStore(now func() time.Time, scope string) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{now: now, scope: scope, orders: map[string]*order{}, claims: map[[2]string]string{}, disc: map[string]*discrepancy{}, held: map[string]int{}}
}

// DeleteOrder is the host deleting its row of order no (a buyer's "delete
// my order"; hard or soft, as sqlstore's Mapping with a soft-delete Where
// sees it: either way the row leaves the store's view), with its seat
// claims. The discrepancy records stay: they are the library's. It reports
// whether the order was there.
func (s *Store) DeleteOrder(no string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[no]
	if !ok {
		return false
	}
	for _, seat := range o.seats {
		delete(s.claims, [2]string{o.o.ShowID, seat})
	}
	delete(s.orders, no)
	return true
}

// HoldRow is the host holding order no's row in a transaction of its own
// (SELECT … FOR UPDATE while it calls its payment provider) until letGo is
// called. Meanwhile a write of that order (CancelPending, PayPending,
// ReinstateCancelled, SetDeadline, MarkWarned) fails as a lock wait that
// timed out does, with an error wrapping context.DeadlineExceeded, and
// CancelDue skips it as sqlstore's batch does (FOR UPDATE SKIP LOCKED):
// the batch's other orders go on. Reads are not held (a database's reads
// do not wait for a row lock).
func (s *Store) HoldRow(no string) (letGo func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[no]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.held[no]--; s.held[no] == 0 {
				delete(s.held, no)
			}
		})
	}
}

// rowHeld is a write's answer for an order whose row the host holds
// (HoldRow), with s.mu held: nil when it is not held.
func (s *Store) rowHeld(no string) error {
	if s.held[no] > 0 {
		return fmt.Errorf("memstore: order %s: its row is held by another transaction: %w", no, context.DeadlineExceeded)
	}
	return nil
}

// Scope implements cancel.OrderStore.
func (s *Store) Scope() string { return s.scope }

func (s *Store) fail(op string) error {
	if s.Fail != nil {
		return s.Fail(op)
	}
	return nil
}

// Now returns the store's clock.
func (s *Store) Now(context.Context) (time.Time, error) { return s.now(), nil }

// Place inserts a pending order and its seat claims, all or nothing, like
// sqlstore's Place: an existing order number gives an error wrapping
// cancel.ErrOrderExists, a seat claimed by a live order one wrapping
// cancel.ErrSeatUnavailable.
func (s *Store) Place(_ context.Context, p cancel.Placement) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if err := s.fail("Place"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.orders[p.OrderNo]; ok {
		return fmt.Errorf("memstore: place order %s: %w", p.OrderNo, cancel.ErrOrderExists)
	}
	for _, seat := range p.Seats {
		if _, taken := s.claims[[2]string{p.ShowID, seat}]; taken {
			return fmt.Errorf("memstore: seat %s/%s: %w", p.ShowID, seat, cancel.ErrSeatUnavailable)
		}
	}
	for _, seat := range p.Seats {
		s.claims[[2]string{p.ShowID, seat}] = p.OrderNo
	}
	seats := slices.Clone(p.Seats)
	sort.Strings(seats)
	s.orders[p.OrderNo] = &order{o: expiry.Order{No: p.OrderNo, UserID: p.UserID, ShowID: p.ShowID, ExpireAt: p.ExpireAt.Truncate(time.Millisecond)}, seats: seats, placed: slices.Clone(seats), limit: p.Limit, lockID: p.LockID, written: s.now(), created: s.now()}
	return nil
}

// Order implements cancel.OrderStore.
func (s *Store) Order(_ context.Context, no string) (expiry.Order, error) {
	if err := s.fail("Order"); err != nil {
		return expiry.Order{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[no]
	if !ok {
		return expiry.Order{}, fmt.Errorf("memstore: order %s: %w", no, expiry.ErrNotFound)
	}
	out := o.o
	out.ReadAt = s.now()
	return out, nil
}

// CancelPending implements cancel.OrderStore.
func (s *Store) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	if req.UserID != "" && req.OnlyIfDue {
		return cancel.Result{}, errors.New("memstore: a cancel is either the user's or due, not both")
	}
	if err := s.fail("CancelPending"); err != nil {
		return cancel.Result{}, err
	}
	return s.transition(ctx, req.OrderNo, req.UserID, expiry.StatusCancelled, func(o *order) bool {
		return !req.OnlyIfDue || !o.o.ExpireAt.After(s.now())
	}, req.Reason, "")
}

// PayPending implements cancel.OrderStore: it keeps p.PaymentID with the
// order it pays, and answers a paid order with the payment that paid it.
func (s *Store) PayPending(ctx context.Context, p cancel.Payment) (cancel.Result, error) {
	if err := p.Validate(); err != nil {
		return cancel.Result{}, fmt.Errorf("memstore: pay: %w", err)
	}
	if err := s.fail("PayPending"); err != nil {
		return cancel.Result{}, err
	}
	res, err := s.transition(ctx, p.OrderNo, p.UserID, expiry.StatusPaid, func(*order) bool { return true }, "", p.PaymentID)
	notPaidByP := err == nil && !res.Changed && (res.Order.Status != expiry.StatusPaid || res.PaymentID != p.PaymentID)
	if notPaidByP || errors.Is(err, expiry.ErrNotFound) || errors.Is(err, cancel.ErrNotOwner) || errors.Is(err, cancel.ErrDiscrepancy) {
		// The order is gone (the host deleted it), or the number holds
		// another order now (the host reused it, and that order may be
		// paid by its own payment, or cancelled): when this payment's
		// decision says it paid this very order number, it is the payment
		// that paid it, as sqlstore's decision row answers.
		s.mu.Lock()
		d, ok := s.disc[p.PaymentID]
		s.mu.Unlock()
		if ok && d.honoured && d.d.OrderNo == p.OrderNo {
			if p.UserID != "" && p.UserID != d.d.UserID {
				return cancel.Result{}, fmt.Errorf("memstore: order %s: %w", p.OrderNo, cancel.ErrNotOwner)
			}
			return cancel.Result{Order: expiry.Order{No: p.OrderNo, UserID: d.d.UserID, Status: expiry.StatusPaid}, PaymentID: p.PaymentID}, nil
		}
	}
	return res, err
}

// RecordDiscrepancy implements cancel.OrderStore: once per payment id,
// marked tried now by the store's clock.
func (s *Store) RecordDiscrepancy(_ context.Context, d cancel.Discrepancy) (bool, error) {
	if err := d.Validate(); err != nil {
		return false, fmt.Errorf("memstore: record discrepancy: %w", err)
	}
	if err := s.fail("RecordDiscrepancy"); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.disc[d.PaymentID]; ok {
		return false, nil
	}
	now := s.now().UnixMilli()
	s.disc[d.PaymentID] = &discrepancy{d: d, recordedMS: now, triedMS: now}
	return true, nil
}

// ClaimDiscrepancies implements cancel.OrderStore: the unsettled
// records tried at least lease ago (whole milliseconds, rounded up), least
// recently tried first (then by payment id), each marked tried now.
func (s *Store) ClaimDiscrepancies(_ context.Context, lease time.Duration, limit int) ([]cancel.Discrepancy, error) {
	if lease < 0 {
		return nil, fmt.Errorf("memstore: claim discrepancies: negative lease %v", lease)
	}
	if err := s.fail("ClaimDiscrepancies"); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMilli()
	leaseMS := int64((lease + time.Millisecond - 1) / time.Millisecond)
	var due []*discrepancy
	for _, r := range s.disc {
		if !r.settled && r.triedMS <= now-leaseMS {
			due = append(due, r)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		if due[i].triedMS != due[j].triedMS {
			return due[i].triedMS < due[j].triedMS
		}
		return due[i].d.PaymentID < due[j].d.PaymentID
	})
	var out []cancel.Discrepancy
	for _, r := range due[:min(len(due), limit)] {
		r.triedMS = max(now, r.triedMS+1)
		out = append(out, r.d)
	}
	return out, nil
}

// SettleDiscrepancy implements cancel.OrderStore. Idempotent; a
// payment id never recorded gives an error wrapping expiry.ErrNotFound.
func (s *Store) SettleDiscrepancy(_ context.Context, paymentID string) error {
	if err := s.fail("SettleDiscrepancy"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.disc[paymentID]
	if !ok {
		return fmt.Errorf("memstore: settle discrepancy of payment %s: %w", paymentID, expiry.ErrNotFound)
	}
	r.settled = true
	return nil
}

// transition moves order no from pending to to when guard allows it,
// storing reason (a cancel) or paymentID (a payment) with it.
func (s *Store) transition(ctx context.Context, no, userID string, to expiry.Status, guard func(*order) bool, reason cancel.Reason, paymentID string) (cancel.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.transitionLocked(ctx, no, userID, to, guard, reason, paymentID, s.hook)
}

// transitionLocked is transition with s.mu held, running hook (nil: none).
func (s *Store) transitionLocked(ctx context.Context, no, userID string, to expiry.Status, guard func(*order) bool, reason cancel.Reason, paymentID string, hook cancel.Hook) (cancel.Result, error) {
	o, ok := s.orders[no]
	if !ok {
		return cancel.Result{}, fmt.Errorf("memstore: order %s: %w", no, expiry.ErrNotFound)
	}
	if err := s.rowHeld(no); err != nil {
		return cancel.Result{}, err
	}
	if userID != "" && o.o.UserID != userID {
		return cancel.Result{}, fmt.Errorf("memstore: order %s: %w", no, cancel.ErrNotOwner)
	}
	cur := o.o
	cur.ReadAt = s.now()
	if o.o.Status != expiry.StatusPending || !guard(o) {
		return cancel.Result{Order: cur, PaymentID: o.paymentID}, nil
	}
	if paymentID != "" {
		// The payment id's fate, decided once in the discrepancies' key
		// space, as a reinstatement decides it (sqlstore's decision row).
		if _, decided := s.disc[paymentID]; decided {
			return cancel.Result{Order: cur}, fmt.Errorf("memstore: pay %s: payment %s decided before: %w", no, paymentID, cancel.ErrDiscrepancy)
		}
	}
	if hook != nil {
		// What the transition will return, before anything changes: a
		// failed hook leaves the order, its claims and the payment id as
		// they were, as sqlstore's rollback does.
		r := cur
		r.Status = to
		change := cancel.Result{Changed: true, Order: r, Seats: slices.Clone(o.seats), PaymentID: paymentID, Reason: reason, LockID: o.lockID}
		if err := hook(ctx, nil, change); err != nil {
			return cancel.Result{}, fmt.Errorf("memstore: order %s: %w: %w", no, cancel.ErrHook, err)
		}
	}
	if paymentID != "" {
		nowMS := s.now().UnixMilli()
		s.disc[paymentID] = &discrepancy{d: cancel.Discrepancy{PaymentID: paymentID, OrderNo: no, UserID: o.o.UserID},
			recordedMS: nowMS, triedMS: nowMS, settled: true, honoured: true}
	}
	o.o.Status, o.reason, o.paymentID, o.written = to, reason, paymentID, s.now()
	cur.Status = to
	seats := slices.Clone(o.seats)
	if to == expiry.StatusCancelled {
		for _, seat := range o.seats {
			delete(s.claims, [2]string{o.o.ShowID, seat})
		}
		o.seats = nil
	}
	return cancel.Result{Changed: true, Order: cur, Seats: seats, PaymentID: o.paymentID, Reason: reason, LockID: o.lockID}, nil
}

// Expired implements cancel.OrderStore like sqlstore's: pending orders
// due by the store's clock in (expire_at, order number) order, strictly after
// cursor, which is "expire_at_ms|order_no" ("" starts); next is "" after a
// page shorter than limit.
func (s *Store) Expired(_ context.Context, cursor string, limit int) ([]string, string, error) {
	if err := s.fail("Expired"); err != nil {
		return nil, "", err
	}
	if limit <= 0 {
		return nil, "", nil
	}
	afterMS, afterNo := int64(math.MinInt64), ""
	if cursor != "" {
		msText, no, ok := strings.Cut(cursor, "|")
		ms, err := strconv.ParseInt(msText, 10, 64)
		if !ok || err != nil || expiry.ValidateID("order number", no) != nil {
			return nil, "", fmt.Errorf("memstore: expired: %w: %q is not a cursor of Expired", expiry.ErrInvalidID, cursor)
		}
		afterMS, afterNo = ms, no
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var due []*order
	for _, o := range s.orders {
		ms := o.o.ExpireAt.UnixMilli()
		if o.o.Status == expiry.StatusPending && !o.o.ExpireAt.After(now) &&
			(ms > afterMS || ms == afterMS && o.o.No > afterNo) {
			due = append(due, o)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		if !due[i].o.ExpireAt.Equal(due[j].o.ExpireAt) {
			return due[i].o.ExpireAt.Before(due[j].o.ExpireAt)
		}
		return due[i].o.No < due[j].o.No
	})
	var out []string
	for _, o := range due[:min(len(due), limit)] {
		out = append(out, o.o.No)
	}
	if len(out) < limit {
		return out, "", nil
	}
	last := due[limit-1].o
	return out, strconv.FormatInt(last.ExpireAt.UnixMilli(), 10) + "|" + last.No, nil
}

// Overdue reports the pending orders whose expire_at is at or before the
// store's clock (the ones Expired finds): how many, and how long past its
// expire_at the earliest of them is (0 when there is none). It is what
// expiry/prometheus's overdue poller reads, with the semantics of
// sqlstore's Store.Overdue.
func (s *Store) Overdue(context.Context) (n int, oldest time.Duration, err error) {
	if err := s.fail("Overdue"); err != nil {
		return 0, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, o := range s.orders {
		if o.o.Status == expiry.StatusPending && !o.o.ExpireAt.After(now) {
			n++
			oldest = max(oldest, now.Sub(o.o.ExpireAt))
		}
	}
	return n, oldest, nil
}

// Statuses implements cancel.OrderStore: each order's age is the time
// since its last write by the store's clock, in whole milliseconds (as
// sqlstore's), never negative.
func (s *Store) Statuses(_ context.Context, nos []string) (map[string]cancel.OrderState, error) {
	if err := s.fail("Statuses"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make(map[string]cancel.OrderState, len(nos))
	for _, no := range nos {
		if o, ok := s.orders[no]; ok {
			out[no] = cancel.OrderState{Status: o.o.Status, Age: cancel.OrderAge(now.Sub(o.written).Truncate(time.Millisecond)), ShowID: o.o.ShowID, LockID: o.lockID, Seats: slices.Clone(o.placed)}
		}
	}
	return out, nil
}

// Claims implements cancel.OrderStore; the cursor is "show|seat".
func (s *Store) Claims(_ context.Context, cursor string, limit int) ([]cancel.Claim, string, error) {
	if err := s.fail("Claims"); err != nil {
		return nil, "", err
	}
	if limit <= 0 {
		return nil, "", nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []cancel.Claim
	for key, no := range s.claims {
		o := s.orders[no]
		all = append(all, cancel.Claim{ShowID: key[0], SeatID: key[1], OrderNo: no, UserID: o.o.UserID, Status: o.o.Status, LockID: o.lockID})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].ShowID != all[j].ShowID {
			return all[i].ShowID < all[j].ShowID
		}
		return all[i].SeatID < all[j].SeatID
	})
	start := 0
	if show, seat, ok := strings.Cut(cursor, "|"); ok {
		start = sort.Search(len(all), func(i int) bool {
			return all[i].ShowID > show || all[i].ShowID == show && all[i].SeatID > seat
		})
	}
	end := min(start+max(limit, 0), len(all))
	out := all[start:end]
	if end == len(all) {
		return out, "", nil
	}
	last := out[len(out)-1]
	return out, last.ShowID + "|" + last.SeatID, nil
}

// Snapshot copies the store's rows and returns a function that puts them
// back, as a database that failed over to an asynchronous replica lacking
// every commit made after the snapshot: orders, claims and discrepancy
// records all go back to what they were. For tests of what the library does
// when SQL goes back in time; the seat store keeps what it has.
func (s *Store) Snapshot() (restore func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	copyAll := func(orders map[string]*order, claims map[[2]string]string, disc map[string]*discrepancy) (map[string]*order, map[[2]string]string, map[string]*discrepancy) {
		o2 := make(map[string]*order, len(orders))
		for k, v := range orders {
			c := *v
			c.seats, c.placed = slices.Clone(v.seats), slices.Clone(v.placed)
			o2[k] = &c
		}
		d2 := make(map[string]*discrepancy, len(disc))
		for k, v := range disc {
			c := *v
			d2[k] = &c
		}
		c2 := make(map[[2]string]string, len(claims))
		for k, v := range claims {
			c2[k] = v
		}
		return o2, c2, d2
	}
	orders, claims, disc := copyAll(s.orders, s.claims, s.disc)
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.orders, s.claims, s.disc = copyAll(orders, claims, disc)
	}
}

// CancelDue implements cancel.OrderStore: each listed order still
// pending and due by the store's clock is cancelled as CancelPending
// cancels it (each order atomically, as in one transaction of sqlstore).
// An order whose row the host holds (HoldRow) is skipped, as sqlstore's
// SKIP LOCKED skips it: absent from the result, the others changed.
func (s *Store) CancelDue(ctx context.Context, orderNos []string, reason cancel.Reason) ([]cancel.Result, error) {
	if err := cancel.ValidateBatch(orderNos, reason); err != nil {
		return nil, fmt.Errorf("memstore: cancel due: %w", err)
	}
	if err := s.fail("CancelDue"); err != nil {
		return nil, err
	}
	s.mu.Lock() // one lock for the batch: its transaction
	defer s.mu.Unlock()
	due := func(o *order) bool { return !o.o.ExpireAt.After(s.now()) }
	var nos []string
	seen := make(map[string]bool, len(orderNos))
	for _, no := range orderNos {
		if o, ok := s.orders[no]; ok && !seen[no] && s.held[no] == 0 && o.o.Status == expiry.StatusPending && due(o) {
			nos = append(nos, no)
		}
		seen[no] = true
	}
	if s.hook != nil {
		// Every order's hook before any changes, as sqlstore runs them in
		// the batch's transaction: one failure changes nothing.
		for _, no := range nos {
			o := s.orders[no]
			r := o.o
			r.ReadAt, r.Status = s.now(), expiry.StatusCancelled
			change := cancel.Result{Changed: true, Order: r, Seats: slices.Clone(o.seats), Reason: reason, LockID: o.lockID}
			if err := s.hook(ctx, nil, change); err != nil {
				return nil, fmt.Errorf("memstore: cancel due: order %s: %w: %w", no, cancel.ErrHook, err)
			}
		}
	}
	var out []cancel.Result
	for _, no := range nos {
		res, err := s.transitionLocked(ctx, no, "", expiry.StatusCancelled, due, reason, "", nil)
		if err != nil {
			return nil, err // cannot happen: the orders were checked under the same lock
		}
		out = append(out, res)
	}
	return out, nil
}

var _ cancel.OrderStore = (*Store)(nil)
