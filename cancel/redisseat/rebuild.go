// The rebuild after a loss: the marker that tells it, and the claims of SQL
// given back to the seats that lack them.

package redisseat

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Lost implements cancel.SeatStore. It reports whether the
// namespace's marker key says the seat state must be rebuilt from SQL (Redis
// lost its data, or this namespace was never rebuilt), and names the rebuild:
// the first caller after a loss starts one under a fresh random token, and
// every caller gets that token until MarkRestored succeeds or the data is
// lost again (the marker with it, so the next caller starts a new rebuild).
// When not lost, token is "".
func (s *Seats) Lost(ctx context.Context) (token string, lost bool, err error) {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	res, err := lostScript.Run(ctx, s.rdb, []string{s.markerKey()}, hex.EncodeToString(b[:])).Slice()
	err = s.seen(err)
	if err != nil {
		return "", false, fmt.Errorf("redisseat: lost: %w", err)
	}
	if len(res) != 2 {
		return "", false, fmt.Errorf("redisseat: lost: unexpected reply %v", res)
	}
	code, _ := res[0].(int64)
	token, _ = res[1].(string)
	if code != 1 {
		return "", false, nil
	}
	return token, true, nil
}

// MarkRestored implements cancel.SeatStore: it records that the
// rebuild named token is complete, atomically and only if token is still the
// current rebuild's; otherwise (the data was lost again, so the rebuild must
// start over) it changes nothing and returns an error wrapping
// cancel.ErrRestoreInterrupted. Marking the same rebuild twice is not an
// error.
func (s *Seats) MarkRestored(ctx context.Context, token string) error {
	if token == "" {
		return fmt.Errorf("redisseat: mark restored without a token: %w", cancel.ErrRestoreInterrupted)
	}
	n, err := markScript.Run(ctx, s.rdb, []string{s.markerKey()}, token).Int()
	err = s.seen(err)
	if err != nil {
		return fmt.Errorf("redisseat: mark restored: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("redisseat: mark restored %q: %w", token, cancel.ErrRestoreInterrupted)
	}
	return nil
}

// Restore implements cancel.SeatStore: it gives free seats the state of
// their SQL claims (locked at the server's time for a pending order, sold for
// a paid one), raising the user's counter for each, and turns a paid order's
// locks (same order and user) into sales; seats held otherwise are left
// alone. A pending claim's lock is restored under the claim's LockID when it
// has one. It is idempotent and returns the number of seats changed. A claim
// with an invalid id fails the whole call before anything changes.
func (s *Seats) Restore(ctx context.Context, claims []cancel.Claim) (int, error) {
	byShow := map[string][]any{}
	sales := map[string]bool{}
	var shows []string
	for _, c := range claims {
		for _, f := range [...]struct{ kind, id string }{{"show id", c.ShowID}, {"seat id", c.SeatID}, {"order number", c.OrderNo}, {"user id", c.UserID}} {
			if err := expiry.ValidateID(f.kind, f.id); err != nil {
				return 0, fmt.Errorf("redisseat: restore: %w", err)
			}
		}
		if err := cancel.ValidateLockID(c.LockID); err != nil {
			return 0, fmt.Errorf("redisseat: restore: %w", err)
		}
		kind := "L"
		if c.Status == expiry.StatusPaid {
			kind = "S"
			sales[c.ShowID] = true
		} else if c.Status != expiry.StatusPending {
			continue // a cancelled order has no claim to restore
		}
		if _, ok := byShow[c.ShowID]; !ok {
			shows = append(shows, c.ShowID)
		}
		// The order's own lock comes back under its id (and the time in
		// it), so the reconciler keeps telling it from any other lock.
		byShow[c.ShowID] = append(byShow[c.ShowID], c.SeatID, c.OrderNo, c.UserID, kind, strings.Replace(c.LockID, ".", "|", 1))
	}
	changed := 0
	for _, show := range shows {
		// Unlike Lock, no SADD before the script: the reconciler's claims
		// pass restores every round, and listing every show with a claim
		// (sold seats mostly) would undo the scan's unlisting each time. The
		// show is listed after the script when it restored a lock, which is
		// what the argument in ScanLocks needs.
		res, err := restoreScript.Run(ctx, s.rdb, s.keys(show), byShow[show]...).Int64Slice()
		err = s.seen(err)
		if err != nil || len(res) != 2 {
			_ = s.list(ctx, show) // it may have run
			return changed, fmt.Errorf("redisseat: restore %s: %v %w", show, res, err)
		}
		changed += int(res[0])
		if res[1] > 0 {
			if err := s.list(ctx, show); err != nil {
				return changed, fmt.Errorf("redisseat: restore %s: %w", show, err)
			}
		}
		if res[0] > res[1] && sales[show] { // sales restored: list the show for ScanSold
			if err := s.seen(s.rdb.SAdd(ctx, s.soldShowsKey(), show).Err()); err != nil {
				return changed, fmt.Errorf("redisseat: restore %s: %w", show, err)
			}
		}
	}
	return changed, nil
}

// Missing returns the claims whose seat the store does not hold as the claim
// says: the seat is free, or a paid claim's seat is still only locked by its
// order. It changes nothing (one HMGET per show). The reconciler reads SQL
// again for what Missing returns before it restores, so a seat that a cancel
// released between the claims read and now is never locked again. Part of
// cancel.SeatStore.
func (s *Seats) Missing(ctx context.Context, claims []cancel.Claim) ([]cancel.Claim, error) {
	byShow := map[string][]cancel.Claim{}
	var shows []string
	for _, c := range claims {
		if err := validateHold(cancel.Hold{ShowID: c.ShowID, OrderNo: c.OrderNo, UserID: c.UserID, Seats: []string{c.SeatID}}); err != nil {
			return nil, err
		}
		if _, ok := byShow[c.ShowID]; !ok {
			shows = append(shows, c.ShowID)
		}
		byShow[c.ShowID] = append(byShow[c.ShowID], c)
	}
	var out []cancel.Claim
	for _, show := range shows {
		cs := byShow[show]
		fields := make([]string, len(cs))
		for i, c := range cs {
			fields[i] = c.SeatID
		}
		vals, err := s.rdb.HMGet(ctx, s.seatsKey(show), fields...).Result()
		err = s.seen(err)
		if err != nil {
			return nil, fmt.Errorf("redisseat: missing %s: %w", show, err)
		}
		for i, c := range cs {
			v, _ := vals[i].(string)
			st, ok := parseValue(v)
			switch {
			case !ok: // free (or a value this package did not write: left alone by Restore)
				if vals[i] == nil {
					out = append(out, c)
				}
			case c.Status == expiry.StatusPaid && st.Status == cancel.SeatLocked && st.OrderNo == c.OrderNo && st.UserID == c.UserID:
				out = append(out, c)
			}
		}
	}
	return out, nil
}
