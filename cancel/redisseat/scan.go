// The reconciler's view of the seat store: the shows that hold locks, a
// bounded scan of their locks, and a finished show's retirement.

package redisseat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// ListedShows returns, sorted, the shows the lock scan walks (<ns>:shows):
// every show that holds a lock is among them; a show without locks stays
// until a scan passes it.
func (s *Seats) ListedShows(ctx context.Context) ([]string, error) {
	shows, err := s.rdb.SMembers(ctx, s.showsKey()).Result()
	err = s.seen(err)
	if err != nil {
		return nil, fmt.Errorf("redisseat: listed shows: %w", err)
	}
	slices.Sort(shows)
	return shows, nil
}

// ScanLocks implements cancel.SeatStore: the seat locks of every listed
// show, a bounded batch at a time. cursor "" starts a pass; the returned
// cursor continues it, and is "" when the pass is complete. count bounds the
// entries examined per call, about (Redis's SSCAN COUNT is a hint, and a
// small index is returned whole): each live lock is one entry and each
// listed show at least one, so a pass costs the live locks, never the sold
// seats. Locks may be returned twice within a pass if an index is rehashed
// meanwhile; the reconciler's actions are idempotent. Each lock's Age is the
// server's TIME, read by the script that reads the lock, minus its lock
// time.
//
// A show whose index the scan finds empty is removed from <ns>:shows, which
// keeps a pass proportional to the shows with locks. This is race-free with
// a concurrent Lock, by this argument: every script that can make an index
// non-empty from empty reports it (the lock script when it found the index
// empty; restore and reindex whenever they added to it), and its caller
// then adds the show to <ns>:shows (SADD) after the script; the scan (and
// RetireShow) removes the show (SREM), then reads the index's size (SCARD)
// and adds the show back if it is not empty. Take the last SREM of a show
// and the current stretch of time during which its index has been
// non-empty, which began with one such script e. If e ran after that SREM,
// e's caller's SADD came later still. If e ran before it, the index was
// non-empty throughout, so the SCARD that follows the SREM saw it and the
// scan added the show back. Either way a SADD follows the last SREM: once
// the calls in flight have returned, a show with a lock is listed. (If the
// scanning process dies between its SREM and its SCARD, or the SADD after a
// script fails, the show stays unlisted until the next Lock attempt in it,
// which lists it before its script: until then nobody is waiting for those
// seats.) TestLockScanRaceKeepsLockedShowsListed widens each window on real
// Redis and fails without either SADD-after or the re-check.
func (s *Seats) ScanLocks(ctx context.Context, cursor string, count int) ([]cancel.SeatLock, string, error) {
	if count <= 0 {
		count = 100
	}
	show, scur, err := parseCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	shows, err := s.ListedShows(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("redisseat: scan: %w", err)
	}
	i, found := slices.BinarySearch(shows, show)
	if !found {
		scur = "0" // the cursor's show was unlisted meanwhile: start the next one
	}
	var locks []cancel.SeatLock
	examined := 0
	for ; i < len(shows); i, scur = i+1, "0" {
		show = shows[i]
		if expiry.ValidateID("show id", show) != nil {
			continue // not ours; never build a key from it
		}
		for {
			b, err := s.scanBatch(ctx, show, scur, max(count-examined, 1))
			if err != nil {
				return nil, "", err
			}
			locks = append(locks, b.locks...)
			examined += max(b.entries, 1)
			scur = b.next
			if b.card == 0 {
				s.at("scan: index empty, before unlisting")
				if err := s.unlistIfEmpty(ctx, show); err != nil {
					return nil, "", err
				}
				break
			}
			if scur == "0" {
				break
			}
			if examined >= count {
				return locks, show + "|" + scur, nil
			}
		}
		if examined >= count && i+1 < len(shows) {
			return locks, shows[i+1] + "|0", nil
		}
	}
	return locks, "", nil
}

type batch struct {
	locks   []cancel.SeatLock
	entries int    // index entries read
	next    string // SSCAN cursor, "0" when done
	card    int64  // index size after the batch
}

func (s *Seats) scanBatch(ctx context.Context, show, cursor string, count int) (batch, error) {
	res, err := scanScript.Run(ctx, s.rdb, []string{s.seatsKey(show), s.lockedKey(show)}, cursor, count).Slice()
	err = s.seen(err)
	if err != nil {
		return batch{}, fmt.Errorf("redisseat: scan %s: %w", show, err)
	}
	if len(res) < 4 || len(res)%2 != 0 {
		return batch{}, fmt.Errorf("redisseat: scan %s: unexpected reply of %d values", show, len(res))
	}
	next, _ := res[0].(string)
	sec, err1 := strconv.ParseInt(fmt.Sprint(res[1]), 10, 64)
	usec, err2 := strconv.ParseInt(fmt.Sprint(res[2]), 10, 64)
	card, ok := res[3].(int64)
	if next == "" || err1 != nil || err2 != nil || !ok {
		return batch{}, fmt.Errorf("redisseat: scan %s: unexpected reply %v", show, res[:4])
	}
	now := time.Unix(sec, usec*1000)
	b := batch{next: next, card: card, entries: (len(res) - 4) / 2}
	for j := 4; j+1 < len(res); j += 2 {
		seat, _ := res[j].(string)
		v, _ := res[j+1].(string)
		st, ok := parseValue(v)
		if !ok || st.Status != cancel.SeatLocked {
			continue
		}
		b.locks = append(b.locks, cancel.SeatLock{ShowID: show, SeatID: seat, OrderNo: st.OrderNo, UserID: st.UserID,
			LockedAt: st.LockedAt, Age: max(now.Sub(st.LockedAt), 0), LockID: st.LockID})
	}
	return b, nil
}

// unlistIfEmpty removes show from <ns>:shows and adds it back if its index
// is not empty (see ScanLocks). It runs to the end even when ctx is done.
func (s *Seats) unlistIfEmpty(ctx context.Context, show string) error {
	ctx, done := context.WithTimeout(context.WithoutCancel(ctx), relistTimeout)
	defer done()
	if err := s.seen(s.rdb.SRem(ctx, s.showsKey(), show).Err()); err != nil {
		return fmt.Errorf("redisseat: unlist %s: %w", show, err)
	}
	s.at("unlist: removed, before the re-check")
	n, err := s.rdb.SCard(ctx, s.lockedKey(show)).Result()
	err = s.seen(err)
	if err != nil || n > 0 {
		if aerr := s.seen(s.rdb.SAdd(ctx, s.showsKey(), show).Err()); aerr != nil {
			return fmt.Errorf("redisseat: relist %s: %w", show, errors.Join(err, aerr))
		}
	}
	if err != nil {
		return fmt.Errorf("redisseat: unlist %s: %w", show, err)
	}
	return nil
}

func parseCursor(c string) (string, string, error) {
	if c == "" {
		return "", "0", nil
	}
	show, num, ok := strings.Cut(c, "|")
	if _, err := strconv.ParseUint(num, 10, 64); !ok || err != nil {
		return "", "", fmt.Errorf("redisseat: bad scan cursor %q", c)
	}
	return show, num, nil
}

// RetireShow deletes a finished show's keys (seats, counters, lock index)
// and unlists it, so that Redis no longer keeps every ticket ever sold. It
// refuses, with an error wrapping ErrShowHasLocks and nothing deleted, while
// the show holds locks: release or sell them first. Call it only once the
// show can no longer be booked: a Lock afterwards starts the show afresh,
// its sold seats forgotten (SQL's unique seat key still refuses a second
// sale), and a rebuild from SQL (Restore) brings back whatever claims SQL
// still holds for it. Idempotent.
func (s *Seats) RetireShow(ctx context.Context, show string) error {
	if err := expiry.ValidateID("show id", show); err != nil {
		return fmt.Errorf("redisseat: %w", err)
	}
	n, err := retireScript.Run(ctx, s.rdb, s.keys(show)).Int()
	err = s.seen(err)
	if err != nil {
		return fmt.Errorf("redisseat: retire %s: %w", show, err)
	}
	if n > 0 {
		return fmt.Errorf("redisseat: retire %s: %w (%d)", show, ErrShowHasLocks, n)
	}
	if err := s.seen(s.rdb.SRem(ctx, s.soldShowsKey(), show).Err()); err != nil {
		return fmt.Errorf("redisseat: retire %s: %w", show, err)
	}
	return s.unlistIfEmpty(ctx, show)
}

// Reindex adds to the lock index every lock found in the namespace's seat
// hashes, and returns how many it added. Run it once after upgrading from a
// version of this package without the index, before relying on ScanLocks:
// locks written by that version are in the hashes only, invisible to the
// scan. It finds the hashes by SCAN over the keyspace (every master of a
// cluster), so shows a scan has unlisted meanwhile are found too, and reads
// every seat, a batch at a time: a one-off cost. Idempotent and safe while
// the store is in use.
func (s *Seats) Reindex(ctx context.Context) (int, error) {
	added := 0
	reindex := func(ctx context.Context, c redis.UniversalClient) error {
		prefix, suffix := s.ns+":{", "}:seats"
		iter := c.ScanType(ctx, 0, prefix+"*"+suffix, 1000, "hash").Iterator()
		for iter.Next(ctx) {
			show := strings.TrimSuffix(strings.TrimPrefix(iter.Val(), prefix), suffix)
			if expiry.ValidateID("show id", show) != nil {
				continue // not ours
			}
			if err := s.seen(s.rdb.SAdd(ctx, s.soldShowsKey(), show).Err()); err != nil { // for ScanSold
				return fmt.Errorf("show %s: %w", show, err)
			}
			n, err := s.reindexShow(ctx, show)
			added += n
			if err != nil {
				return err
			}
		}
		return iter.Err()
	}
	var err error
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return reindex(ctx, n) })
	default:
		err = reindex(ctx, s.rdb)
	}
	if err != nil {
		return added, fmt.Errorf("redisseat: reindex: %w", err)
	}
	return added, nil
}

func (s *Seats) reindexShow(ctx context.Context, show string) (int, error) {
	added := 0
	var cur uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, s.seatsKey(show), cur, "", 1000).Result()
		err = s.seen(err)
		if err != nil {
			return added, fmt.Errorf("show %s: %w", show, err)
		}
		var seats []any
		for j := 0; j+1 < len(kv); j += 2 {
			if strings.HasPrefix(kv[j+1], "L|") {
				seats = append(seats, kv[j])
			}
		}
		if len(seats) > 0 {
			res, err := reindexScript.Run(ctx, s.rdb, []string{s.seatsKey(show), s.lockedKey(show)}, seats...).Int64Slice()
			err = s.seen(err)
			if err != nil || len(res) != 2 {
				return added, fmt.Errorf("show %s: %v %w", show, res, err)
			}
			added += int(res[0])
			if res[0] > 0 {
				if err := s.list(ctx, show); err != nil {
					return added, fmt.Errorf("show %s: %w", show, err)
				}
			}
		}
		if cur = next; cur == 0 {
			return added, nil
		}
	}
}
