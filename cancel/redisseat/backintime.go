package redisseat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// What the seat store keeps for when SQL goes back in time (see cancel's
// backintime.go): a set <ns>:sold of the shows whose seats may be sold,
// which the reconciler's sold pass walks (ScanSold), and one key per
// refunded payment id, <ns>:refund:{<payment id>} (value: the order), the
// refund hook's record beside SQL's (SeatStore.Refunded). Neither has a
// TTL; a refund key is a few dozen bytes per refund, kept for good, since a
// provider may repeat a callback late.

// ScanSold implements cancel.SeatStore: the sold seats of every show
// listed in <ns>:sold (Lock lists a show, in the same round trip as its
// listing for the lock scan; Restore and Reindex list the shows whose sales
// they wrote; RetireShow unlists), a bounded batch at a time. cursor ""
// starts a pass; the returned cursor, "<show>|<HSCAN cursor>", continues it
// and is "" when the pass is complete. count bounds the hash entries
// examined per call, about (HSCAN's COUNT is a hint): a pass reads every
// seat held, locked or sold, like the reconciler's claims pass reads SQL's.
// A sale may be returned twice if a hash is rehashed meanwhile.
func (s *Seats) ScanSold(ctx context.Context, cursor string, count int) ([]cancel.SeatSale, string, error) {
	if count <= 0 {
		count = 100
	}
	show, hcur, err := parseCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	shows, err := s.rdb.SMembers(ctx, s.soldShowsKey()).Result()
	if err = s.seen(err); err != nil {
		return nil, "", fmt.Errorf("redisseat: scan sold: %w", err)
	}
	slices.Sort(shows)
	i, found := slices.BinarySearch(shows, show)
	if !found {
		hcur = "0" // the cursor's show was unlisted meanwhile: start the next one
	}
	var out []cancel.SeatSale
	examined := 0
	for ; i < len(shows); i, hcur = i+1, "0" {
		show = shows[i]
		if expiry.ValidateID("show id", show) != nil {
			continue // not ours; never build a key from it
		}
		cur, _ := strconv.ParseUint(hcur, 10, 64)
		for {
			kv, next, err := s.rdb.HScan(ctx, s.seatsKey(show), cur, "", int64(max(count-examined, 1))).Result()
			if err = s.seen(err); err != nil {
				return nil, "", fmt.Errorf("redisseat: scan sold %s: %w", show, err)
			}
			examined += max(len(kv)/2, 1)
			for j := 0; j+1 < len(kv); j += 2 {
				if st, ok := parseValue(kv[j+1]); ok && st.Status == cancel.SeatSold {
					out = append(out, cancel.SeatSale{ShowID: show, SeatID: kv[j], OrderNo: st.OrderNo, UserID: st.UserID})
				}
			}
			cur = next
			if cur == 0 {
				break
			}
			if examined >= count {
				return out, show + "|" + strconv.FormatUint(cur, 10), nil
			}
		}
		if examined >= count && i+1 < len(shows) {
			return out, shows[i+1] + "|0", nil
		}
	}
	return out, "", nil
}

// SeatStates implements cancel.SeatStore: the locked and sold seats among
// seats of show (one HMGET); free seats, and values this package did not
// write, are absent.
func (s *Seats) SeatStates(ctx context.Context, show string, seats []string) (map[string]cancel.SeatState, error) {
	if err := expiry.ValidateID("show id", show); err != nil {
		return nil, fmt.Errorf("redisseat: %w", err)
	}
	for _, seat := range seats {
		if err := expiry.ValidateID("seat id", seat); err != nil {
			return nil, fmt.Errorf("redisseat: %w", err)
		}
	}
	out := map[string]cancel.SeatState{}
	if len(seats) == 0 {
		return out, nil
	}
	vals, err := s.rdb.HMGet(ctx, s.seatsKey(show), seats...).Result()
	if err = s.seen(err); err != nil {
		return nil, fmt.Errorf("redisseat: seats of %s: %w", show, err)
	}
	for i, v := range vals {
		if str, ok := v.(string); ok {
			if st, ok := parseValue(str); ok {
				out[seats[i]] = st
			}
		}
	}
	return out, nil
}

// Refunded implements cancel.SeatStore: whether <ns>:refund:{paymentID}
// exists.
func (s *Seats) Refunded(ctx context.Context, paymentID string) (bool, error) {
	if err := expiry.ValidateID("payment id", paymentID); err != nil {
		return false, fmt.Errorf("redisseat: %w", err)
	}
	err := s.rdb.Get(ctx, s.refundKey(paymentID)).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err = s.seen(err); err != nil {
		return false, fmt.Errorf("redisseat: refunded %s: %w", paymentID, err)
	}
	return true, nil
}

// MarkRefunded implements cancel.SeatStore: SET NX of
// <ns>:refund:{paymentID} to orderNo (the first mark stays), no TTL.
func (s *Seats) MarkRefunded(ctx context.Context, paymentID, orderNo string) error {
	if err := expiry.ValidateID("payment id", paymentID); err != nil {
		return fmt.Errorf("redisseat: %w", err)
	}
	if err := expiry.ValidateID("order number", orderNo); err != nil {
		return fmt.Errorf("redisseat: %w", err)
	}
	if err := s.seen(s.rdb.SetNX(ctx, s.refundKey(paymentID), orderNo, 0).Err()); err != nil {
		return fmt.Errorf("redisseat: mark refunded %s: %w", paymentID, err)
	}
	return nil
}
