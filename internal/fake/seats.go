package fake

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

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
