package memstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Seats is an in-memory seat store with the semantics of cancel/redisseat:
// it passes the same conformance suite (cancel/canceltest.RunSeats), so the
// two cannot drift. It implements cancel.SeatStore. Its clock (NewSeats)
// plays the Redis server's: lock
// times and ages are read from it. Safe for concurrent use.
type Seats struct {
	mu       sync.Mutex
	now      func() time.Time
	seats    map[string]map[string]cancel.SeatState // show → seat → state
	locked   map[string]map[string]struct{}         // show → locked seats (the lock index)
	listed   map[string]struct{}                    // shows the lock scan walks
	held     map[[2]string]int                      // (show, user) → seats held
	refunds  map[string]string                      // payment id → order (SeatStore.Refunded)
	token    string                                 // the current (or completed) rebuild's token
	restored bool
	tokens   int
	// gen numbers the locks of each show, as redisseat's generation key:
	// a lock's id is "<lockedMs>.<gen>". Kept across Wipe, so an id is
	// never reused.
	gen map[string]uint64
	// scope and scopes: see Scoped. scopes is shared by a store and the
	// scoped stores made from it.
	scope  string
	scopes *scopes
	// Fail, when set, is returned by every call whose name it is given
	// ("Lock", "Release", "Sell", "ScanLocks", "Lost", "Restore",
	// "MarkRestored", "RetireShow", "ScanSold", "SeatStates", "Refunded",
	// "MarkRefunded").
	Fail func(op string) error
}

// NewSeats returns an empty seat store whose clock is now (nil: time.Now).
func NewSeats(now func() time.Time) *Seats {
	if now == nil {
		now = time.Now
	}
	s := &Seats{now: now, gen: map[string]uint64{}, scopes: &scopes{m: map[string]*Seats{}}}
	s.scopes.m[""] = s
	s.reset()
	return s
}

type scopes struct {
	mu sync.Mutex
	m  map[string]*Seats
}

// Scoped returns the seat store of scope, as redisseat.Seats.Scoped: seats
// of its own that the store it was made from and other scopes never see
// (the same one for the same scope; "" the store NewSeats made). Its Scope
// is scope; its Fail is its own. Wipe on any of them wipes them all, as a
// Redis that lost its data.
func (s *Seats) Scoped(scope string) *Seats {
	s.scopes.mu.Lock()
	defer s.scopes.mu.Unlock()
	c := s.scopes.m[scope]
	if c == nil {
		c = &Seats{now: s.now, gen: map[string]uint64{}, scope: scope, scopes: s.scopes}
		c.reset()
		s.scopes.m[scope] = c
	}
	return c
}

// Scope implements cancel.OrderStore.
func (s *Seats) Scope() string { return s.scope }

func (s *Seats) reset() {
	s.seats = map[string]map[string]cancel.SeatState{}
	s.locked = map[string]map[string]struct{}{}
	s.listed = map[string]struct{}{}
	s.held = map[[2]string]int{}
	s.refunds = map[string]string{}
	s.token, s.restored = "", false
}

// lockID returns the id of a new lock in show, taken at now.
func (s *Seats) lockID(show string, now time.Time) string {
	s.gen[show]++
	return strconv.FormatInt(now.UnixMilli(), 10) + "." + strconv.FormatUint(s.gen[show], 10)
}

func (s *Seats) fail(op string) error {
	if s.Fail != nil {
		return s.Fail(op)
	}
	return nil
}

// Now returns the store's clock, the one lock times and ages are read from.
func (s *Seats) Now(context.Context) (time.Time, error) { return s.now(), nil }

func (s *Seats) show(show string) map[string]cancel.SeatState {
	if s.seats[show] == nil {
		s.seats[show] = map[string]cancel.SeatState{}
	}
	return s.seats[show]
}

func (s *Seats) index(show, seat string, locked bool) {
	if !locked {
		delete(s.locked[show], seat)
		return
	}
	if s.locked[show] == nil {
		s.locked[show] = map[string]struct{}{}
	}
	s.locked[show][seat] = struct{}{}
	s.listed[show] = struct{}{} // lock, restore: the show is listed with its first lock
}

// Lock implements cancel.SeatStore (see redisseat.Seats.Lock): every seat
// must be free; a seat listed twice is refused by Hold.Validate.
func (s *Seats) Lock(_ context.Context, h cancel.Hold, limit int) (string, error) {
	if err := h.Validate(); err != nil {
		return "", err
	}
	if limit < 0 {
		return "", fmt.Errorf("memstore: lock %s: negative limit %d", h.OrderNo, limit)
	}
	if err := s.fail("Lock"); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(h.Seats) == 0 {
		return "", nil
	}
	s.listed[h.ShowID] = struct{}{} // as redisseat: every attempt lists the show
	for _, seat := range h.Seats {
		if _, ok := s.seats[h.ShowID][seat]; ok {
			return "", fmt.Errorf("memstore: seat %s: %w", seat, cancel.ErrSeatUnavailable)
		}
	}
	key := [2]string{h.ShowID, h.UserID}
	if limit > 0 && s.held[key]+len(h.Seats) > limit {
		return "", fmt.Errorf("memstore: user %s: %w", h.UserID, cancel.ErrLimitExceeded)
	}
	now := s.now().Truncate(time.Millisecond)
	show := s.show(h.ShowID)
	id := s.lockID(h.ShowID, now)
	for _, seat := range h.Seats {
		show[seat] = cancel.SeatState{Status: cancel.SeatLocked, OrderNo: h.OrderNo, UserID: h.UserID, LockedAt: now, LockID: id}
		s.index(h.ShowID, seat, true)
	}
	s.held[key] += len(h.Seats)
	return id, nil
}

// Release implements cancel.SeatReleaser (see redisseat.Seats.Release).
func (s *Seats) Release(_ context.Context, h cancel.Hold) (int, error) {
	if err := h.Validate(); err != nil {
		return 0, err
	}
	if err := s.fail("Release"); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.release(h), nil
}

// release is Release under s.mu.
func (s *Seats) release(h cancel.Hold) int {
	freed := 0
	for _, seat := range h.Seats {
		if st, ok := s.seats[h.ShowID][seat]; ok && st.Status == cancel.SeatLocked && st.OrderNo == h.OrderNo && (h.LockID == "" || st.LockID == h.LockID) {
			delete(s.seats[h.ShowID], seat)
			s.index(h.ShowID, seat, false)
			key := [2]string{h.ShowID, st.UserID}
			s.held[key] = max(s.held[key]-1, 0)
			freed++
		}
	}
	return freed
}

// ReleaseAll implements cancel.SeatStore (see redisseat.Seats.ReleaseAll):
// Release for each of holds, the holds of one show in one atomic step.
// Seats.Fail is asked once per show with "Release": a failing step frees
// none of that show's holds and counts -1 for each, as redisseat's does.
func (s *Seats) ReleaseAll(_ context.Context, holds []cancel.Hold) ([]int, error) {
	for _, h := range holds {
		if err := h.Validate(); err != nil {
			return nil, err
		}
	}
	out := make([]int, len(holds))
	failed := map[string]error{}
	var errs []error
	for _, h := range holds {
		if _, asked := failed[h.ShowID]; !asked {
			failed[h.ShowID] = s.fail("Release")
			if failed[h.ShowID] != nil {
				errs = append(errs, failed[h.ShowID])
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, h := range holds {
		if failed[h.ShowID] != nil {
			out[i] = -1
			continue
		}
		out[i] = s.release(h)
	}
	return out, errors.Join(errs...)
}

// Sell implements cancel.SeatStore (see redisseat.Seats.Sell).
func (s *Seats) Sell(_ context.Context, h cancel.Hold) (int, error) {
	if err := h.Validate(); err != nil {
		return 0, err
	}
	if err := s.fail("Sell"); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	show := s.show(h.ShowID)
	sold := 0
	for _, seat := range h.Seats {
		st, ok := show[seat]
		if ok && (st.Status != cancel.SeatLocked || st.OrderNo != h.OrderNo || st.UserID != h.UserID) {
			continue
		}
		if h.LockID != "" && (!ok || st.LockID != h.LockID) {
			continue // that very lock only
		}
		if !ok {
			s.held[[2]string{h.ShowID, h.UserID}]++
		}
		show[seat] = cancel.SeatState{Status: cancel.SeatSold, OrderNo: h.OrderNo, UserID: h.UserID}
		s.index(h.ShowID, seat, false)
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

// ListedShows returns, sorted, the shows the lock scan walks (see
// redisseat.Seats.ListedShows).
func (s *Seats) ListedShows(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listedShows(), nil
}

func (s *Seats) listedShows() []string {
	out := make([]string, 0, len(s.listed))
	for show := range s.listed {
		out = append(out, show)
	}
	slices.Sort(out)
	return out
}

// ScanLocks implements cancel.SeatStore (see redisseat.Seats.ScanLocks):
// it walks the listed shows' lock indexes, never the sold seats, counting one
// entry per lock and at least one per show, and unlists a show whose index
// is empty. The cursor is "show|seat" of the next entry to examine.
func (s *Seats) ScanLocks(_ context.Context, cursor string, count int) ([]cancel.SeatLock, string, error) {
	if err := s.fail("ScanLocks"); err != nil {
		return nil, "", err
	}
	if count <= 0 {
		count = 100
	}
	cshow, cseat, _ := strings.Cut(cursor, "|")
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var locks []cancel.SeatLock
	examined := 0
	for _, show := range s.listedShows() {
		if show < cshow {
			continue
		}
		if examined >= count {
			return locks, show + "|", nil
		}
		if len(s.locked[show]) == 0 {
			delete(s.listed, show)
			delete(s.locked, show)
			examined++
			continue
		}
		before := examined
		seats := make([]string, 0, len(s.locked[show]))
		for seat := range s.locked[show] {
			if show != cshow || seat >= cseat {
				seats = append(seats, seat)
			}
		}
		slices.Sort(seats)
		for _, seat := range seats {
			if examined >= count {
				return locks, show + "|" + seat, nil
			}
			st := s.seats[show][seat]
			locks = append(locks, cancel.SeatLock{ShowID: show, SeatID: seat, OrderNo: st.OrderNo, UserID: st.UserID,
				LockedAt: st.LockedAt, Age: max(now.Sub(st.LockedAt), 0), LockID: st.LockID})
			examined++
		}
		if examined == before {
			examined++ // every show costs at least one entry, as in redisseat
		}
	}
	return locks, "", nil
}

// RetireShow deletes a show's seats, counters and index (see
// redisseat.Seats.RetireShow); it refuses while the show holds locks.
func (s *Seats) RetireShow(_ context.Context, show string) error {
	if err := expiry.ValidateID("show id", show); err != nil {
		return err
	}
	if err := s.fail("RetireShow"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.locked[show]); n > 0 {
		return fmt.Errorf("memstore: retire %s: %d seats still locked", show, n)
	}
	delete(s.seats, show)
	delete(s.locked, show)
	delete(s.listed, show)
	for key := range s.held {
		if key[0] == show {
			delete(s.held, key)
		}
	}
	return nil
}

// Wipe forgets every seat, counter, index and the restored marker with its
// rebuild token, as a Redis restart without persistence does.
func (s *Seats) Wipe() {
	s.scopes.mu.Lock()
	all := []*Seats{s}
	for _, c := range s.scopes.m {
		if c != s {
			all = append(all, c)
		}
	}
	s.scopes.mu.Unlock()
	for _, c := range all {
		c.mu.Lock()
		c.reset()
		c.mu.Unlock()
	}
}

// Lost implements cancel.SeatStore (see redisseat.Seats.Lost): the
// first call after a loss starts a rebuild under a new token, and every call
// returns it until MarkRestored succeeds or the store is wiped again.
func (s *Seats) Lost(context.Context) (string, bool, error) {
	if err := s.fail("Lost"); err != nil {
		return "", false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.restored {
		return "", false, nil
	}
	if s.token == "" {
		s.tokens++
		s.token = fmt.Sprintf("rebuild-%d", s.tokens)
	}
	return s.token, true, nil
}

// MarkRestored implements cancel.SeatStore (see
// redisseat.Seats.MarkRestored).
func (s *Seats) MarkRestored(_ context.Context, token string) error {
	if err := s.fail("MarkRestored"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if token == "" || token != s.token {
		return fmt.Errorf("memstore: mark restored %q: %w", token, cancel.ErrRestoreInterrupted)
	}
	s.restored = true
	return nil
}

// Restore implements cancel.SeatStore (see redisseat.Seats.Restore).
func (s *Seats) Restore(_ context.Context, claims []cancel.Claim) (int, error) {
	if err := s.fail("Restore"); err != nil {
		return 0, err
	}
	for _, c := range claims {
		if err := (cancel.Hold{ShowID: c.ShowID, OrderNo: c.OrderNo, UserID: c.UserID, Seats: []string{c.SeatID}}).Validate(); err != nil {
			return 0, err
		}
		if err := cancel.ValidateLockID(c.LockID); err != nil {
			return 0, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := 0
	now := s.now().Truncate(time.Millisecond)
	ids := map[string]string{} // one lock id per show, as one script call in redisseat
	for _, c := range claims {
		if c.Status != expiry.StatusPending && c.Status != expiry.StatusPaid {
			continue
		}
		show := s.show(c.ShowID)
		st, ok := show[c.SeatID]
		switch {
		case !ok && c.Status == expiry.StatusPaid:
			show[c.SeatID] = cancel.SeatState{Status: cancel.SeatSold, OrderNo: c.OrderNo, UserID: c.UserID}
		case !ok && c.LockID != "":
			// The order's own lock again, under its id (and the time in it):
			// the reconciler keeps telling it from any other lock.
			ms, _, _ := strings.Cut(c.LockID, ".")
			n, _ := strconv.ParseInt(ms, 10, 64)
			show[c.SeatID] = cancel.SeatState{Status: cancel.SeatLocked, OrderNo: c.OrderNo, UserID: c.UserID, LockedAt: time.UnixMilli(n).UTC(), LockID: c.LockID}
			s.index(c.ShowID, c.SeatID, true)
		case !ok:
			if ids[c.ShowID] == "" {
				ids[c.ShowID] = s.lockID(c.ShowID, now)
			}
			show[c.SeatID] = cancel.SeatState{Status: cancel.SeatLocked, OrderNo: c.OrderNo, UserID: c.UserID, LockedAt: now, LockID: ids[c.ShowID]}
			s.index(c.ShowID, c.SeatID, true)
		case c.Status == expiry.StatusPaid && st.Status == cancel.SeatLocked && st.OrderNo == c.OrderNo && st.UserID == c.UserID:
			show[c.SeatID] = cancel.SeatState{Status: cancel.SeatSold, OrderNo: c.OrderNo, UserID: c.UserID}
			s.index(c.ShowID, c.SeatID, false)
			changed++
			continue
		default:
			continue
		}
		s.held[[2]string{c.ShowID, c.UserID}]++
		changed++
	}
	return changed, nil
}

// Missing implements cancel.SeatStore (see redisseat.Seats.Missing).
func (s *Seats) Missing(_ context.Context, claims []cancel.Claim) ([]cancel.Claim, error) {
	if err := s.fail("Missing"); err != nil {
		return nil, err
	}
	for _, c := range claims {
		if err := (cancel.Hold{ShowID: c.ShowID, OrderNo: c.OrderNo, UserID: c.UserID, Seats: []string{c.SeatID}}).Validate(); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []cancel.Claim
	for _, c := range claims {
		st, ok := s.seats[c.ShowID][c.SeatID]
		if !ok || c.Status == expiry.StatusPaid && st.Status == cancel.SeatLocked && st.OrderNo == c.OrderNo && st.UserID == c.UserID {
			out = append(out, c)
		}
	}
	return out, nil
}

// WipeShow forgets one show's seats, lock index and counters, as Redis does
// when it evicts the show's keys or a replica that had not received them is
// promoted: the restored marker stays, so only the reconciler's claims pass
// notices (it refills what SQL claims).
func (s *Seats) WipeShow(show string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.seats, show)
	delete(s.locked, show)
	for key := range s.held {
		if key[0] == show {
			delete(s.held, key)
		}
	}
}

// ScanSold implements cancel.SeatStore (see redisseat.Seats.ScanSold):
// the sold seats of every show, in (show, seat) order, count sales per call.
// The cursor is "show|seat" of the next sale.
func (s *Seats) ScanSold(_ context.Context, cursor string, count int) ([]cancel.SeatSale, string, error) {
	if err := s.fail("ScanSold"); err != nil {
		return nil, "", err
	}
	if count <= 0 {
		count = 100
	}
	cshow, cseat, _ := strings.Cut(cursor, "|")
	s.mu.Lock()
	defer s.mu.Unlock()
	shows := make([]string, 0, len(s.seats))
	for show := range s.seats {
		if show >= cshow {
			shows = append(shows, show)
		}
	}
	slices.Sort(shows)
	var out []cancel.SeatSale
	for _, show := range shows {
		var seats []string
		for seat, st := range s.seats[show] {
			if st.Status == cancel.SeatSold && (show != cshow || seat >= cseat) {
				seats = append(seats, seat)
			}
		}
		slices.Sort(seats)
		for _, seat := range seats {
			if len(out) == count {
				return out, show + "|" + seat, nil
			}
			st := s.seats[show][seat]
			out = append(out, cancel.SeatSale{ShowID: show, SeatID: seat, OrderNo: st.OrderNo, UserID: st.UserID})
		}
	}
	return out, "", nil
}

// SeatStates implements cancel.SeatStore (see redisseat.Seats.SeatStates).
func (s *Seats) SeatStates(_ context.Context, show string, seats []string) (map[string]cancel.SeatState, error) {
	if err := expiry.ValidateID("show id", show); err != nil {
		return nil, err
	}
	for _, seat := range seats {
		if err := expiry.ValidateID("seat id", seat); err != nil {
			return nil, err
		}
	}
	if err := s.fail("SeatStates"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]cancel.SeatState{}
	for _, seat := range seats {
		if st, ok := s.seats[show][seat]; ok {
			out[seat] = st
		}
	}
	return out, nil
}

// Refunded implements cancel.SeatStore (see redisseat.Seats.Refunded).
func (s *Seats) Refunded(_ context.Context, paymentID string) (bool, error) {
	if err := expiry.ValidateID("payment id", paymentID); err != nil {
		return false, err
	}
	if err := s.fail("Refunded"); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.refunds[paymentID]
	return ok, nil
}

// MarkRefunded implements cancel.SeatStore (see
// redisseat.Seats.MarkRefunded): the first mark of a payment id stays.
func (s *Seats) MarkRefunded(_ context.Context, paymentID, orderNo string) error {
	if err := expiry.ValidateID("payment id", paymentID); err != nil {
		return err
	}
	if err := expiry.ValidateID("order number", orderNo); err != nil {
		return err
	}
	if err := s.fail("MarkRefunded"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.refunds[paymentID]; !ok {
		s.refunds[paymentID] = orderNo
	}
	return nil
}

var _ cancel.SeatStore = (*Seats)(nil)
