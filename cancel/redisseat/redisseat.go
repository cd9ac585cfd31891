// Package redisseat keeps seat state in Redis (go-redis v9): which seats of a
// show are free, locked by a pending order, or sold, and how many seats each
// user holds (the purchase-limit counter). It implements cancel.SeatReleaser,
// cancel.SeatSeller and the reconciler's lock scan; Lock is what the host
// calls when an order is placed.
//
// Layout, per show, under a namespace (default "oe"): a hash
// <ns>:{<show>}:seats (field seat id, value the seat's state) and a hash
// <ns>:{<show>}:limit (field user id, value seats held in pending and paid
// orders); a set <ns>:shows lists the shows for the reconciler. Services that
// share a Redis but not a database must use different namespaces, or one's
// reconciler would release the other's locks as belonging to missing orders.
// All changes run as Lua scripts on the two keys of one show, which share a
// hash tag, so they are atomic on a single node and on Redis Cluster alike
// (the test command runs the store's suite on a three-master cluster).
//
// Run Redis with persistence (AOF, appendfsync always or everysec). If
// Redis loses its data anyway, the namespace's marker key <ns>:restored is
// gone with it; the reconciler notices (Lost) and rebuilds seats and
// counters from SQL's claims (Restore). Until it has, sold seats look free
// (SQL's unique seat key still refuses a second sale) and counters are low.
// On Redis Cluster the marker lives on one shard: a shard that loses its
// data while the marker's shard keeps it goes unnoticed, so give every shard
// a replica and persistence, or delete the marker after a shard's loss to
// force a rebuild.
//
// The scripts are idempotent, so go-redis may retry them after a lost reply;
// the retry then reports 0 seats where the first run freed them. State stays
// right; only the counts reported (cancel.Result.Released) are low. Set the
// client's MaxRetries to -1 where exact counts matter.
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

// Seats is the Redis seat store. It is safe for concurrent use.
type Seats struct {
	rdb redis.UniversalClient
	ns  string
	now func() time.Time
}

// DefaultNamespace prefixes every key unless New is given another.
const DefaultNamespace = "oe"

// New returns a seat store on rdb (a *redis.Client or *redis.ClusterClient)
// with keys under namespace ("" means DefaultNamespace). The namespace must
// pass expiry.ValidateID.
func New(rdb redis.UniversalClient, namespace string) (*Seats, error) {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	if err := expiry.ValidateID("namespace", namespace); err != nil {
		return nil, fmt.Errorf("redisseat: %w", err)
	}
	if rdb == nil {
		return nil, errors.New("redisseat: nil Redis client")
	}
	return &Seats{rdb: rdb, ns: namespace, now: time.Now}, nil
}

func (s *Seats) showsKey() string            { return s.ns + ":shows" }
func (s *Seats) seatsKey(show string) string { return s.ns + ":{" + show + "}:seats" }
func (s *Seats) limitKey(show string) string { return s.ns + ":{" + show + "}:limit" }

func validateHold(h cancel.Hold) error {
	if err := h.Validate(); err != nil {
		return fmt.Errorf("redisseat: %w", err)
	}
	return nil
}

func args(head []any, seats []string) []any {
	out := make([]any, 0, len(head)+len(seats))
	out = append(out, head...)
	for _, s := range seats {
		out = append(out, s)
	}
	return out
}

// Lock claims h.Seats for h.OrderNo, all or nothing, and raises h.UserID's
// counter by the number claimed. limit is the most seats the user may hold in
// the show (0: no limit). A seat held by another order gives an error
// wrapping cancel.ErrSeatUnavailable; passing the limit, ErrLimitExceeded. Locking
// seats the order already holds is a no-op, so a retried Lock is safe.
// It returns the number of seats newly locked.
func (s *Seats) Lock(ctx context.Context, h cancel.Hold, limit int) (int, error) {
	if err := validateHold(h); err != nil {
		return 0, err
	}
	if len(h.Seats) == 0 {
		return 0, nil
	}
	// The index is written first, outside the script: a show listed with no
	// locks costs the reconciler one empty scan; a lock in an unlisted show
	// would never be reconciled.
	if err := s.rdb.SAdd(ctx, s.showsKey(), h.ShowID).Err(); err != nil {
		return 0, fmt.Errorf("redisseat: lock %s: %w", h.OrderNo, err)
	}
	res, err := lockScript.Run(ctx, s.rdb, []string{s.seatsKey(h.ShowID), s.limitKey(h.ShowID)},
		args([]any{h.OrderNo, h.UserID, limit, s.now().UnixMilli()}, h.Seats)...).Slice()
	if err != nil {
		return 0, fmt.Errorf("redisseat: lock %s: %w", h.OrderNo, err)
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("redisseat: lock %s: unexpected reply %v", h.OrderNo, res)
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		n, _ := res[1].(int64)
		return int(n), nil
	case 0:
		return 0, fmt.Errorf("redisseat: lock %s: seat %v of show %s: %w", h.OrderNo, res[1], h.ShowID, cancel.ErrSeatUnavailable)
	default:
		return 0, fmt.Errorf("redisseat: lock %s: user %s holds %v of %d: %w", h.OrderNo, h.UserID, res[1], limit, cancel.ErrLimitExceeded)
	}
}

// Release implements cancel.SeatReleaser.
func (s *Seats) Release(ctx context.Context, h cancel.Hold) (int, error) {
	return s.run(ctx, "release", releaseScript, h, []any{h.OrderNo})
}

// Sell implements cancel.SeatSeller.
func (s *Seats) Sell(ctx context.Context, h cancel.Hold) (int, error) {
	return s.run(ctx, "sell", sellScript, h, []any{h.OrderNo, h.UserID})
}

func (s *Seats) run(ctx context.Context, op string, script *redis.Script, h cancel.Hold, head []any) (int, error) {
	if err := validateHold(h); err != nil {
		return 0, err
	}
	if len(h.Seats) == 0 {
		return 0, nil
	}
	n, err := script.Run(ctx, s.rdb, []string{s.seatsKey(h.ShowID), s.limitKey(h.ShowID)}, args(head, h.Seats)...).Int()
	if err != nil {
		return 0, fmt.Errorf("redisseat: %s %s: %w", op, h.OrderNo, err)
	}
	return n, nil
}

func parseValue(v string) (cancel.SeatState, bool) {
	parts := strings.Split(v, "|")
	switch {
	case len(parts) == 4 && parts[0] == "L":
		ms, err := strconv.ParseInt(parts[3], 10, 64)
		if err != nil {
			return cancel.SeatState{}, false
		}
		return cancel.SeatState{Status: expiry.StatusPending, OrderNo: parts[1], UserID: parts[2], LockedAt: time.UnixMilli(ms)}, true
	case len(parts) == 3 && parts[0] == "S":
		return cancel.SeatState{Status: expiry.StatusPaid, OrderNo: parts[1], UserID: parts[2]}, true
	}
	return cancel.SeatState{}, false
}

// Show returns every seat of show that is locked or sold. Values this
// package did not write are skipped.
func (s *Seats) Show(ctx context.Context, show string) (map[string]cancel.SeatState, error) {
	if err := expiry.ValidateID("show id", show); err != nil {
		return nil, fmt.Errorf("redisseat: %w", err)
	}
	all, err := s.rdb.HGetAll(ctx, s.seatsKey(show)).Result()
	if err != nil {
		return nil, fmt.Errorf("redisseat: show %s: %w", show, err)
	}
	out := make(map[string]cancel.SeatState, len(all))
	for seat, v := range all {
		if st, ok := parseValue(v); ok {
			out[seat] = st
		}
	}
	return out, nil
}

// Held returns the purchase-limit counter of user in show.
func (s *Seats) Held(ctx context.Context, show, user string) (int, error) {
	if err := expiry.ValidateID("show id", show); err != nil {
		return 0, fmt.Errorf("redisseat: %w", err)
	}
	if err := expiry.ValidateID("user id", user); err != nil {
		return 0, fmt.Errorf("redisseat: %w", err)
	}
	n, err := s.rdb.HGet(ctx, s.limitKey(show), user).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redisseat: held %s/%s: %w", show, user, err)
	}
	return n, nil
}

// ScanLocks returns the seat locks of every show, a bounded batch at a time,
// for the reconciler. cursor "" starts a pass; the returned cursor continues
// it, and is "" when the pass is complete. count bounds the hash entries
// examined per call (about; Redis's HSCAN COUNT is a hint). Locks may be
// returned twice within a pass if the hash is rehashed meanwhile; the
// reconciler's actions are idempotent.
func (s *Seats) ScanLocks(ctx context.Context, cursor string, count int) ([]cancel.SeatLock, string, error) {
	if count <= 0 {
		count = 100
	}
	show, hcur, err := parseCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	shows, err := s.rdb.SMembers(ctx, s.showsKey()).Result()
	if err != nil {
		return nil, "", fmt.Errorf("redisseat: scan: %w", err)
	}
	slices.Sort(shows)
	i, _ := slices.BinarySearch(shows, show)
	var locks []cancel.SeatLock
	examined := 0
	for ; i < len(shows); i, hcur = i+1, 0 {
		show = shows[i]
		if expiry.ValidateID("show id", show) != nil {
			continue // not ours; never build a key from it
		}
		for {
			kv, next, err := s.rdb.HScan(ctx, s.seatsKey(show), hcur, "", int64(count)).Result()
			if err != nil {
				return nil, "", fmt.Errorf("redisseat: scan %s: %w", show, err)
			}
			for j := 0; j+1 < len(kv); j += 2 {
				if st, ok := parseValue(kv[j+1]); ok && st.Status == expiry.StatusPending {
					locks = append(locks, cancel.SeatLock{ShowID: show, SeatID: kv[j], OrderNo: st.OrderNo, UserID: st.UserID, LockedAt: st.LockedAt})
				}
			}
			examined += len(kv) / 2
			hcur = next
			if hcur == 0 {
				break
			}
			if examined >= count {
				return locks, show + "|" + strconv.FormatUint(hcur, 10), nil
			}
		}
		if examined >= count && i+1 < len(shows) {
			return locks, shows[i+1] + "|0", nil
		}
	}
	return locks, "", nil
}

func parseCursor(c string) (string, uint64, error) {
	if c == "" {
		return "", 0, nil
	}
	show, num, ok := strings.Cut(c, "|")
	n, err := strconv.ParseUint(num, 10, 64)
	if !ok || err != nil {
		return "", 0, fmt.Errorf("redisseat: bad scan cursor %q", c)
	}
	return show, n, nil
}

func (s *Seats) markerKey() string { return s.ns + ":restored" }

// Lost reports whether the namespace's marker key is missing: Redis lost its
// data (or this namespace was never rebuilt), so the seat state must be
// rebuilt from SQL. Part of reconcile.SeatRestorer.
func (s *Seats) Lost(ctx context.Context) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.markerKey()).Result()
	if err != nil {
		return false, fmt.Errorf("redisseat: lost: %w", err)
	}
	return n == 0, nil
}

// MarkRestored sets the marker key once a rebuild pass is complete. Part of
// reconcile.SeatRestorer.
func (s *Seats) MarkRestored(ctx context.Context) error {
	if err := s.rdb.Set(ctx, s.markerKey(), s.now().UnixMilli(), 0).Err(); err != nil {
		return fmt.Errorf("redisseat: mark restored: %w", err)
	}
	return nil
}

// Restore gives free seats the state of their SQL claims (locked for a
// pending order, sold for a paid one), raising the user's counter for each,
// and turns a paid order's locks into sales; seats held otherwise are left
// alone. It is idempotent and returns the number of seats changed. Part of
// reconcile.SeatRestorer.
func (s *Seats) Restore(ctx context.Context, claims []cancel.Claim) (int, error) {
	byShow := map[string][]any{}
	var shows []string
	for _, c := range claims {
		for _, f := range [...]struct{ kind, id string }{{"show id", c.ShowID}, {"seat id", c.SeatID}, {"order number", c.OrderNo}, {"user id", c.UserID}} {
			if err := expiry.ValidateID(f.kind, f.id); err != nil {
				return 0, fmt.Errorf("redisseat: restore: %w", err)
			}
		}
		kind := "L"
		if c.Status == expiry.StatusPaid {
			kind = "S"
		} else if c.Status != expiry.StatusPending {
			continue // a cancelled order has no claim to restore
		}
		if byShow[c.ShowID] == nil {
			shows = append(shows, c.ShowID)
			byShow[c.ShowID] = []any{s.now().UnixMilli()}
		}
		byShow[c.ShowID] = append(byShow[c.ShowID], c.SeatID, c.OrderNo, c.UserID, kind)
	}
	changed := 0
	for _, show := range shows {
		if err := s.rdb.SAdd(ctx, s.showsKey(), show).Err(); err != nil {
			return changed, fmt.Errorf("redisseat: restore %s: %w", show, err)
		}
		n, err := restoreScript.Run(ctx, s.rdb, []string{s.seatsKey(show), s.limitKey(show)}, byShow[show]...).Int()
		if err != nil {
			return changed, fmt.Errorf("redisseat: restore %s: %w", show, err)
		}
		changed += n
	}
	return changed, nil
}
