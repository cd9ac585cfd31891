// Package fake has in-memory implementations of the order store and the seat
// store, for unit tests of the core. They pass the same conformance suites
// (cancel/canceltest) as the SQL and Redis adapters, so they cannot drift
// from them. Hosts must not rely on them: they keep everything in memory.
package fake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

type order struct {
	o      expiry.Order
	seats  []string
	reason cancel.Reason
}

// Store is an in-memory order store: cancel.OrderStore, expiry.OrderLookup,
// reconcile.ExpiredFinder and reconcile.StatusReader. Safe for concurrent use.
type Store struct {
	mu     sync.Mutex
	now    func() time.Time
	orders map[string]*order
	claims map[[2]string]string // (show, seat) → order, like oe_order_seat's key
	// Fail, when set, is returned by every call whose name it is given
	// ("Order", "CancelPending", "PayPending", "Expired", "Statuses", "Place"),
	// to inject store failures.
	Fail func(op string) error
}

// NewStore returns an empty store whose clock is now (nil: time.Now).
func NewStore(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{now: now, orders: map[string]*order{}, claims: map[[2]string]string{}}
}

func (s *Store) fail(op string) error {
	if s.Fail != nil {
		return s.Fail(op)
	}
	return nil
}

// Now returns the store's clock.
func (s *Store) Now(context.Context) (time.Time, error) { return s.now(), nil }

// Place inserts a pending order and its seat claims, all or nothing.
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
		return fmt.Errorf("fake: order %s exists", p.OrderNo)
	}
	for _, seat := range p.Seats {
		if _, taken := s.claims[[2]string{p.ShowID, seat}]; taken {
			return fmt.Errorf("fake: seat %s/%s: %w", p.ShowID, seat, cancel.ErrSeatUnavailable)
		}
	}
	for _, seat := range p.Seats {
		s.claims[[2]string{p.ShowID, seat}] = p.OrderNo
	}
	seats := slices.Clone(p.Seats)
	sort.Strings(seats)
	s.orders[p.OrderNo] = &order{o: expiry.Order{No: p.OrderNo, UserID: p.UserID, ShowID: p.ShowID, ExpireAt: p.ExpireAt.Truncate(time.Millisecond)}, seats: seats}
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
		return expiry.Order{}, fmt.Errorf("fake: order %s: %w", no, expiry.ErrNotFound)
	}
	out := o.o
	out.ReadAt = s.now()
	return out, nil
}

// CancelPending implements cancel.OrderStore.
func (s *Store) CancelPending(_ context.Context, req cancel.Request) (cancel.Result, error) {
	if req.UserID != "" && req.OnlyIfDue {
		return cancel.Result{}, errors.New("fake: a cancel is either the user's or due, not both")
	}
	if err := s.fail("CancelPending"); err != nil {
		return cancel.Result{}, err
	}
	return s.transition(req.OrderNo, req.UserID, expiry.StatusCancelled, func(o *order) bool {
		return !req.OnlyIfDue || !o.o.ExpireAt.After(s.now())
	}, req.Reason)
}

// PayPending implements cancel.OrderStore.
func (s *Store) PayPending(_ context.Context, no, userID string) (cancel.Result, error) {
	if err := s.fail("PayPending"); err != nil {
		return cancel.Result{}, err
	}
	return s.transition(no, userID, expiry.StatusPaid, func(*order) bool { return true }, "")
}

func (s *Store) transition(no, userID string, to expiry.Status, guard func(*order) bool, reason cancel.Reason) (cancel.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[no]
	if !ok {
		return cancel.Result{}, fmt.Errorf("fake: order %s: %w", no, expiry.ErrNotFound)
	}
	if userID != "" && o.o.UserID != userID {
		return cancel.Result{}, fmt.Errorf("fake: order %s: %w", no, cancel.ErrNotOwner)
	}
	cur := o.o
	cur.ReadAt = s.now()
	if o.o.Status != expiry.StatusPending || !guard(o) {
		return cancel.Result{Order: cur}, nil
	}
	o.o.Status, o.reason = to, reason
	cur.Status = to
	seats := slices.Clone(o.seats)
	if to == expiry.StatusCancelled {
		for _, seat := range o.seats {
			delete(s.claims, [2]string{o.o.ShowID, seat})
		}
		o.seats = nil
	}
	return cancel.Result{Changed: true, Order: cur, Seats: seats}, nil
}

// Expired implements reconcile.ExpiredFinder.
func (s *Store) Expired(_ context.Context, limit int) ([]string, error) {
	if err := s.fail("Expired"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var due []*order
	for _, o := range s.orders {
		if o.o.Status == expiry.StatusPending && !o.o.ExpireAt.After(now) {
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
	for _, o := range due[:min(len(due), max(limit, 0))] {
		out = append(out, o.o.No)
	}
	return out, nil
}

// Statuses implements reconcile.StatusReader.
func (s *Store) Statuses(_ context.Context, nos []string) (map[string]expiry.Status, error) {
	if err := s.fail("Statuses"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]expiry.Status, len(nos))
	for _, no := range nos {
		if o, ok := s.orders[no]; ok {
			out[no] = o.o.Status
		}
	}
	return out, nil
}

// Claims implements reconcile.ClaimScanner; the cursor is "show|seat".
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
		all = append(all, cancel.Claim{ShowID: key[0], SeatID: key[1], OrderNo: no, UserID: o.o.UserID, Status: o.o.Status})
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

// Seats is an in-memory seat store with the semantics of cancel/redisseat.
// Safe for concurrent use.
type Seats struct {
	mu       sync.Mutex
	restored bool
	now      func() time.Time
	seats    map[string]map[string]cancel.SeatState // show → seat → state
	held     map[[2]string]int                      // (show, user) → seats held
	// Fail, when set, is returned by every call whose name it is given
	// ("Lock", "Release", "Sell", "ScanLocks").
	Fail func(op string) error
}

// NewSeats returns an empty seat store whose clock is now (nil: time.Now).
func NewSeats(now func() time.Time) *Seats {
	if now == nil {
		now = time.Now
	}
	return &Seats{now: now, seats: map[string]map[string]cancel.SeatState{}, held: map[[2]string]int{}}
}

func (s *Seats) fail(op string) error {
	if s.Fail != nil {
		return s.Fail(op)
	}
	return nil
}

// Lock claims seats for an order, all or nothing (see redisseat.Seats.Lock).
func (s *Seats) Lock(_ context.Context, h cancel.Hold, limit int) (int, error) {
	if err := h.Validate(); err != nil {
		return 0, err
	}
	if err := s.fail("Lock"); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	show := s.seats[h.ShowID]
	var fresh []string
	for _, seat := range h.Seats {
		st, ok := show[seat]
		if !ok {
			fresh = append(fresh, seat)
			continue
		}
		if st.Status != expiry.StatusPending || st.OrderNo != h.OrderNo {
			return 0, fmt.Errorf("fake: seat %s: %w", seat, cancel.ErrSeatUnavailable)
		}
	}
	key := [2]string{h.ShowID, h.UserID}
	if limit > 0 && s.held[key]+len(fresh) > limit {
		return 0, fmt.Errorf("fake: user %s: %w", h.UserID, cancel.ErrLimitExceeded)
	}
	if show == nil {
		show = map[string]cancel.SeatState{}
		s.seats[h.ShowID] = show
	}
	now := s.now().Truncate(time.Millisecond)
	for _, seat := range fresh {
		show[seat] = cancel.SeatState{Status: expiry.StatusPending, OrderNo: h.OrderNo, UserID: h.UserID, LockedAt: now}
	}
	s.held[key] += len(fresh)
	return len(fresh), nil
}

// Release implements cancel.SeatReleaser.
func (s *Seats) Release(_ context.Context, h cancel.Hold) (int, error) {
	if err := h.Validate(); err != nil {
		return 0, err
	}
	if err := s.fail("Release"); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	freed, user := 0, ""
	for _, seat := range h.Seats {
		if st, ok := s.seats[h.ShowID][seat]; ok && st.Status == expiry.StatusPending && st.OrderNo == h.OrderNo {
			delete(s.seats[h.ShowID], seat)
			freed, user = freed+1, st.UserID
		}
	}
	if freed > 0 {
		key := [2]string{h.ShowID, user}
		s.held[key] = max(s.held[key]-freed, 0)
	}
	return freed, nil
}

// Sell implements cancel.SeatSeller.
func (s *Seats) Sell(_ context.Context, h cancel.Hold) (int, error) {
	if err := h.Validate(); err != nil {
		return 0, err
	}
	if err := s.fail("Sell"); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seats[h.ShowID] == nil {
		s.seats[h.ShowID] = map[string]cancel.SeatState{}
	}
	sold := 0
	for _, seat := range h.Seats {
		st, ok := s.seats[h.ShowID][seat]
		if ok && (st.Status != expiry.StatusPending || st.OrderNo != h.OrderNo) {
			continue
		}
		if !ok {
			s.held[[2]string{h.ShowID, h.UserID}]++
		}
		s.seats[h.ShowID][seat] = cancel.SeatState{Status: expiry.StatusPaid, OrderNo: h.OrderNo, UserID: h.UserID}
		sold++
	}
	return sold, nil
}

// Show returns the locked and sold seats of show.
func (s *Seats) Show(_ context.Context, show string) (map[string]cancel.SeatState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]cancel.SeatState, len(s.seats[show]))
	for k, v := range s.seats[show] {
		out[k] = v
	}
	return out, nil
}

// Held returns the purchase-limit counter of user in show.
func (s *Seats) Held(_ context.Context, show, user string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[[2]string{show, user}], nil
}

// ScanLocks implements reconcile.LockScanner; the cursor is "show|seat" of
// the next entry to examine.
func (s *Seats) ScanLocks(_ context.Context, cursor string, count int) ([]cancel.SeatLock, string, error) {
	if err := s.fail("ScanLocks"); err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	type entry struct{ show, seat string }
	var all []entry
	for show, seats := range s.seats {
		for seat := range seats {
			all = append(all, entry{show, seat})
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].show != all[j].show {
			return all[i].show < all[j].show
		}
		return all[i].seat < all[j].seat
	})
	start := sort.Search(len(all), func(i int) bool { return all[i].show+"|"+all[i].seat >= cursor })
	if count <= 0 {
		count = 100
	}
	var locks []cancel.SeatLock
	end := min(start+count, len(all))
	for _, e := range all[start:end] {
		if st := s.seats[e.show][e.seat]; st.Status == expiry.StatusPending {
			locks = append(locks, cancel.SeatLock{ShowID: e.show, SeatID: e.seat, OrderNo: st.OrderNo, UserID: st.UserID, LockedAt: st.LockedAt})
		}
	}
	if end == len(all) {
		return locks, "", nil
	}
	return locks, all[end].show + "|" + all[end].seat, nil
}

// Wipe forgets every seat, counter and the restored marker, as a Redis
// restart without persistence does.
func (s *Seats) Wipe() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seats, s.held, s.restored = map[string]map[string]cancel.SeatState{}, map[[2]string]int{}, false
}

// Lost implements reconcile.SeatRestorer.
func (s *Seats) Lost(context.Context) (bool, error) {
	if err := s.fail("Lost"); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.restored, nil
}

// MarkRestored implements reconcile.SeatRestorer.
func (s *Seats) MarkRestored(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restored = true
	return nil
}

// Restore implements reconcile.SeatRestorer (see redisseat.Seats.Restore).
func (s *Seats) Restore(_ context.Context, claims []cancel.Claim) (int, error) {
	if err := s.fail("Restore"); err != nil {
		return 0, err
	}
	for _, c := range claims {
		if err := (cancel.Hold{ShowID: c.ShowID, OrderNo: c.OrderNo, UserID: c.UserID, Seats: []string{c.SeatID}}).Validate(); err != nil {
			return 0, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := 0
	now := s.now().Truncate(time.Millisecond)
	for _, c := range claims {
		if c.Status != expiry.StatusPending && c.Status != expiry.StatusPaid {
			continue
		}
		if s.seats[c.ShowID] == nil {
			s.seats[c.ShowID] = map[string]cancel.SeatState{}
		}
		st, ok := s.seats[c.ShowID][c.SeatID]
		switch {
		case !ok:
			s.seats[c.ShowID][c.SeatID] = cancel.SeatState{Status: c.Status, OrderNo: c.OrderNo, UserID: c.UserID, LockedAt: now}
			if c.Status == expiry.StatusPaid {
				s.seats[c.ShowID][c.SeatID] = cancel.SeatState{Status: c.Status, OrderNo: c.OrderNo, UserID: c.UserID}
			}
			s.held[[2]string{c.ShowID, c.UserID}]++
			changed++
		case c.Status == expiry.StatusPaid && st.Status == expiry.StatusPending && st.OrderNo == c.OrderNo:
			s.seats[c.ShowID][c.SeatID] = cancel.SeatState{Status: expiry.StatusPaid, OrderNo: c.OrderNo, UserID: c.UserID}
			changed++
		}
	}
	return changed, nil
}
