// Package redisseat keeps seat state in Redis (go-redis v9): which seats of a
// show are free, locked by a pending order, or sold, and how many seats each
// user holds (the purchase-limit counter). It implements cancel.SeatStore
// (Lock at placement, Release after a cancel, Sell after a payment) and the
// reconciler's reconcile.Seats (the lock scan and the rebuild from SQL).
//
// # Layout
//
// Per show, under a namespace (default "oe"): a hash <ns>:{<show>}:seats
// (field seat id, value the seat's state), a hash <ns>:{<show>}:limit (field
// user id, value seats held in pending and paid orders) and a set
// <ns>:{<show>}:locked, the lock index (the seats currently locked). A set
// <ns>:shows lists the shows that may hold locks, for the reconciler. Services
// that share a Redis but not a database must use different namespaces, or
// one's reconciler would release the other's locks as belonging to missing
// orders. All changes run as Lua scripts on the three keys of one show, which
// share a hash tag, so they are atomic on a single node and on Redis Cluster
// alike (the test command runs the store's suite on a three-master cluster).
// For when SQL goes back in time, a set <ns>:sold lists the shows whose
// seats may be sold (ScanSold), and <ns>:refund:{<payment id>} records each
// refund the hook made (Refunded, MarkRefunded): see backintime.go.
//
// # Clocks
//
// A lock's time is the Redis server's (TIME inside the lock script), and
// ScanLocks measures a lock's age with the TIME of the same node, read by the
// script that reads the lock: no decision compares two hosts' clocks (invariant
// I11). The scripts need effects replication (the default since Redis 5, the
// only mode since Redis 7).
//
// # Cost of the reconciler's scan
//
// ScanLocks reads the lock index, not the seats: a pass costs one script call
// per listed show plus one entry per live lock, however many seats were ever
// sold. A show leaves <ns>:shows as soon as a scan finds its index empty, and
// comes back with its next lock; RetireShow deletes a finished show's keys.
// State written by a version of this package without the index (locks in
// the hash only) is invisible to the scan until Reindex has run once.
//
// # Losing data
//
// Run Redis with persistence (AOF; appendfsync always, or everysec and accept
// the loss described below) and with a maxmemory-policy that never evicts
// these keys: noeviction or a volatile-* policy (the package sets no TTL).
// Check refuses the allkeys-* policies, which would evict seat state.
//
// If Redis loses all its data, the namespace's marker key <ns>:restored is
// gone with it; the reconciler notices (Lost) and rebuilds seats and counters
// from SQL's claims (Restore) under a rebuild token, and MarkRestored sets the
// marker only if that token is still current, so a second loss during the
// rebuild starts it over instead of being marked restored over a half-empty
// store. Until the rebuild is done, sold seats look free (SQL's unique seat
// key still refuses a second sale) and counters are low.
//
// A partial loss keeps the marker and is not detected here: an AOF with
// appendfsync everysec loses up to a second of writes in a crash, an
// asynchronous replica promoted after its master failed lacks the master's
// last writes, and on Redis Cluster the marker lives on one shard, so a shard
// that loses its data while the marker's shard keeps it goes unnoticed (give
// every shard a replica and persistence, or delete the marker after a
// shard's loss to force a rebuild). A rebuild under way when Redis restarts
// from a persisted marker "R|<token>" may likewise complete over writes the
// restart lost. What such a loss leaves is "claimed in SQL, missing in
// Redis" (a lock or sale that Redis forgot); the reconciler's claims pass,
// which runs every round, restores those seats from SQL, counting each for
// its user. Not repaired: a counter whose seats survived while the limit
// hash lost the increment (nothing recomputes counters; the user may then
// hold more than the limit). The opposite drift, a lock in Redis whose order
// SQL does not have or has ended, is what the reconciler's lock scan
// releases.
//
// # Upgrading
//
// From a version without the lock index: run Reindex once (see there). The
// marker that version wrote (a number) counts as restored. During a rolling
// upgrade an older host takes a rebuild's "R|<token>" marker as restored;
// the worst case is a rebuild that the newer hosts stop early because the
// older one marked the store restored after its own unconditional rebuild.
//
// # Failover on Redis Cluster
//
// When a master dies and its replica is promoted (automatically, or by
// CLUSTER FAILOVER TAKEOVER), a *redis.ClusterClient keeps sending the dead
// master's slots to the dead address until it reloads its slot map, which
// go-redis does on a MOVED or READONLY reply or every
// ClusterStateReloadInterval (60 s by default): a node that refuses
// connections gives neither. So on a call that could not reach its node the
// store asks the client to reload (ClusterClient.ReloadState), and the calls
// after it reach the promoted node. Meanwhile the calls for those slots fail
// with the connection's error (and while the master of <ns>:shows is down,
// every Lock: the show is listed first). The promoted replica lacks the
// master's last writes: the partial loss described above, which the
// reconciler repairs.
//
// # Retries
//
// Release, Sell and Restore are idempotent, so go-redis may retry them after
// a lost reply; the retry then reports 0 seats where the first run freed
// them. State stays right; only the counts reported (cancel.Result.Released)
// are low. Lock is not: a retried Lock finds the seats it locked a moment
// ago and fails with cancel.ErrSeatUnavailable, leaving them locked by an
// order the host never inserts, which the reconciler releases after its
// grace period. Set the client's MaxRetries to -1 where that matters.
package redisseat

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
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
	rdb   redis.UniversalClient
	ns    string // the keys' prefix: root, or root:<scope> (Scoped)
	root  string // New's namespace
	scope string // see Scoped
	// cluster is rdb when it is a *redis.ClusterClient: told to reload its
	// slot map when a node cannot be reached (see seen).
	cluster *redis.ClusterClient
	// pause, set only by this package's tests, is called at the points of
	// the listing protocol where a race would hurt (see ScanLocks), to
	// widen them.
	pause func(point string)
}

func (s *Seats) at(point string) {
	if s.pause != nil {
		s.pause(point)
	}
}

// DefaultNamespace prefixes every key unless New is given another.
const DefaultNamespace = "oe"

// ErrShowHasLocks reports that RetireShow refused a show that still holds
// locks; nothing was deleted.
var ErrShowHasLocks = errors.New("redisseat: show still holds seat locks")

// ErrEvictingPolicy reports that Redis may evict keys that have no TTL
// (maxmemory-policy allkeys-*), so seat state could vanish under memory
// pressure.
var ErrEvictingPolicy = errors.New("redisseat: Redis may evict seat state")

// relistTimeout bounds the SADD that lists a show again after a script, run
// even when the caller's context is done (see ScanLocks).
const relistTimeout = 5 * time.Second

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
	cluster, _ := rdb.(*redis.ClusterClient)
	return &Seats{rdb: rdb, ns: namespace, root: namespace, cluster: cluster}, nil
}

// Scoped returns a seat store on the same client whose keys are those of
// scope only: under <namespace>:<scope, escaped>, so that stores of two
// scopes (tenants sharing one database through a Mapping's Where, and one
// Redis) never read or change each other's keys, and each one's reconciler
// scans its own locks (invariant I16). Its Scope is scope; pass the order
// store's (sqlstore.Store.Scope), which cancel.New and reconcile.New check.
// "" is the namespace itself.
func (s *Seats) Scoped(scope string) *Seats {
	c := *s
	c.scope, c.ns = scope, s.root
	if scope != "" {
		// QueryEscape keeps the key one Redis word and escapes the braces
		// that would change a Cluster hash tag.
		c.ns = s.root + ":" + url.QueryEscape(scope)
	}
	return &c
}

// Scope implements cancel.Scoped: the scope given to Scoped ("" for New's).
func (s *Seats) Scope() string { return s.scope }

// seen passes on the error of a Redis call. On Redis Cluster, an error that
// is not a server's reply (a node that refuses connections, resets them or
// stops answering) makes the client reload its slot map at once: after a
// failover the dead master's slots are served by its promoted replica, and
// go-redis reloads on its own only after a MOVED or READONLY reply or every
// ClusterStateReloadInterval (60 s by default), neither of which a dead node
// gives. The reload runs in the background, one at a time.
func (s *Seats) seen(err error) error {
	if s.cluster != nil && unreachable(err) {
		s.cluster.ReloadState(context.Background())
	}
	return err
}

// unreachable reports whether err says the server was not reached (or did
// not answer), rather than answering with an error or the caller giving up.
func unreachable(err error) bool {
	if err == nil {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) { // dial, read, write: also when wrapped in a dial timeout
		return true
	}
	var reply redis.Error
	if errors.As(err, &reply) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return true // io.EOF, a closed pool, a timeout without a context
}

func (s *Seats) showsKey() string             { return s.ns + ":shows" }
func (s *Seats) soldShowsKey() string         { return s.ns + ":sold" }
func (s *Seats) refundKey(id string) string   { return s.ns + ":refund:{" + id + "}" }
func (s *Seats) markerKey() string            { return s.ns + ":restored" }
func (s *Seats) seatsKey(show string) string  { return s.ns + ":{" + show + "}:seats" }
func (s *Seats) limitKey(show string) string  { return s.ns + ":{" + show + "}:limit" }
func (s *Seats) lockedKey(show string) string { return s.ns + ":{" + show + "}:locked" }
func (s *Seats) genKey(show string) string    { return s.ns + ":{" + show + "}:gen" }

// keys are the four keys of a show, in the order the scripts take them.
func (s *Seats) keys(show string) []string {
	return []string{s.seatsKey(show), s.limitKey(show), s.lockedKey(show), s.genKey(show)}
}

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

// list adds show to <ns>:shows, even when ctx is done: it runs after a
// script that may have made the show's lock index non-empty (see ScanLocks).
func (s *Seats) list(ctx context.Context, show string) error {
	ctx, done := context.WithTimeout(context.WithoutCancel(ctx), relistTimeout)
	defer done()
	return s.seen(s.rdb.SAdd(ctx, s.showsKey(), show).Err())
}

// Lock implements cancel.SeatLocker: it locks every seat of h for h.OrderNo
// and h.UserID, all or nothing, at the Redis server's time, and raises the
// user's counter by len(h.Seats). limit is the most seats the user may hold
// in the show (0: no limit). A seat that is not free (locked by any order,
// this order number included, or sold) gives an error wrapping
// cancel.ErrSeatUnavailable; passing the limit, cancel.ErrLimitExceeded; a
// hold that fails Hold.Validate (a seat listed twice, more than
// cancel.MaxSeats), expiry.ErrInvalidID. On error nothing was locked, except
// after a connection error, when the script may have run (see the package
// doc on retries). It returns the lock's id, "<ms>.<gen>" (empty for a hold
// without seats).
func (s *Seats) Lock(ctx context.Context, h cancel.Hold, limit int) (string, error) {
	if err := validateHold(h); err != nil {
		return "", err
	}
	if limit < 0 {
		return "", fmt.Errorf("redisseat: lock %s: negative limit %d", h.OrderNo, limit)
	}
	if len(h.Seats) == 0 {
		return "", nil
	}
	// The show is listed before the script, so that every Lock attempt in a
	// show lists it (see ScanLocks for why this and the SADD after are
	// enough), and a lock in an unlisted show is never left behind.
	// The same round trip lists it for the sold pass (ScanSold): every
	// show whose seats are ever sold had a lock first, or a rebuild
	// (Restore and Reindex list those).
	keys, argv := s.keys(h.ShowID), args([]any{h.OrderNo, h.UserID, limit}, h.Seats)
	var res []any
	var err error
	if _, single := s.rdb.(*redis.Client); single {
		res, err = s.listAndLock(ctx, h, keys, argv)
	} else {
		// On a cluster (or a ring) the two keys may live on different
		// servers, and a pipeline would send to both at once: list first,
		// then lock.
		if err := s.seen(s.listBoth(ctx, h.ShowID)); err != nil {
			return "", fmt.Errorf("redisseat: lock %s: %w", h.OrderNo, err)
		}
		s.at("lock: listed, before the script")
		res, err = lockScript.Run(ctx, s.rdb, keys, argv...).Slice()
		err = s.seen(err)
	}
	if err != nil {
		// The script may have run (a lost reply): list the show again in
		// case a scan unlisted it meanwhile.
		_ = s.list(ctx, h.ShowID)
		return "", fmt.Errorf("redisseat: lock %s: %w", h.OrderNo, err)
	}
	if len(res) < 2 {
		return "", fmt.Errorf("redisseat: lock %s: unexpected reply %v", h.OrderNo, res)
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		if len(res) != 3 {
			return "", fmt.Errorf("redisseat: lock %s: unexpected reply %v", h.OrderNo, res)
		}
		if first, _ := res[1].(int64); first == 1 {
			// The index was empty: a scan may have unlisted the show since
			// our SADD. The seats are locked whatever this returns; if it
			// fails, the next Lock attempt in the show lists it again.
			_ = s.list(ctx, h.ShowID)
		}
		id, _ := res[2].(string)
		if cancel.ValidateLockID(id) != nil || id == "" {
			return "", fmt.Errorf("redisseat: lock %s: unexpected lock id in reply %v", h.OrderNo, res)
		}
		return id, nil
	case 0:
		return "", fmt.Errorf("redisseat: lock %s: seat %v of show %s: %w", h.OrderNo, res[1], h.ShowID, cancel.ErrSeatUnavailable)
	case -1:
		return "", fmt.Errorf("redisseat: lock %s: user %s holds %v of %d: %w", h.OrderNo, h.UserID, res[1], limit, cancel.ErrLimitExceeded)
	case -2:
		return "", fmt.Errorf("redisseat: lock %s: %w: seat %v listed twice", h.OrderNo, expiry.ErrInvalidID, res[1])
	default:
		return "", fmt.Errorf("redisseat: lock %s: unexpected reply %v", h.OrderNo, res)
	}
}

// listBoth lists show for the lock scan and for the sold pass (ScanSold),
// in one round trip.
func (s *Seats) listBoth(ctx context.Context, show string) error {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, s.showsKey(), show)
		p.SAdd(ctx, s.soldShowsKey(), show)
		return nil
	})
	return err
}

// listAndLock is the SADD of the show (and of <ns>:sold) and the lock script in one round trip
// (a pipeline on one server runs them in order, the SADD first), where two
// calls in sequence cost a placement a second round trip. Should the SADD
// fail while the script locked (the server refused a write for memory, say,
// and then accepted the script's), the lock is not left in an unlisted
// show: the show is listed again, or else the lock is released and the
// listing's error returned.
func (s *Seats) listAndLock(ctx context.Context, h cancel.Hold, keys []string, argv []any) ([]any, error) {
	pipe := s.rdb.Pipeline()
	sadd := pipe.SAdd(ctx, s.showsKey(), h.ShowID)
	sold := pipe.SAdd(ctx, s.soldShowsKey(), h.ShowID)
	run := lockScript.EvalSha(ctx, pipe, keys, argv...)
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	res, err := run.Slice()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// The first call after a server restart or SCRIPT FLUSH: Run
		// loads the script (the show is listed by now, or sadd says why not).
		res, err = lockScript.Run(ctx, s.rdb, keys, argv...).Slice()
	}
	err = s.seen(err)
	if lerr := s.seen(errors.Join(sadd.Err(), sold.Err())); lerr != nil {
		if err == nil && len(res) == 3 {
			if code, _ := res[0].(int64); code == 1 {
				if s.list(ctx, h.ShowID) == nil && s.seen(s.rdb.SAdd(ctx, s.soldShowsKey(), h.ShowID).Err()) == nil {
					return res, nil
				}
				id, _ := res[2].(string)
				h.LockID = id
				_, _ = s.Release(context.WithoutCancel(ctx), h)
			}
		}
		return nil, lerr
	}
	return res, err
}

// Release implements cancel.SeatReleaser: it frees the seats of h still
// locked by h.OrderNo (by the lock h.LockID only, when set; for whichever
// user: each user's counter goes down by that user's seats freed) and
// returns how many it freed.
func (s *Seats) Release(ctx context.Context, h cancel.Hold) (int, error) {
	return s.run(ctx, "release", releaseScript, h, []any{h.OrderNo, h.LockID})
}

// Sell implements cancel.SeatSeller: seats of h locked by h.OrderNo for
// h.UserID, or free, become sold to it; it returns how many. A seat locked
// by the same order number for another user is left alone, like another
// order's.
func (s *Seats) Sell(ctx context.Context, h cancel.Hold) (int, error) {
	return s.run(ctx, "sell", sellScript, h, []any{h.OrderNo, h.UserID, h.LockID})
}

func (s *Seats) run(ctx context.Context, op string, script *redis.Script, h cancel.Hold, head []any) (int, error) {
	if err := validateHold(h); err != nil {
		return 0, err
	}
	if len(h.Seats) == 0 {
		return 0, nil
	}
	n, err := script.Run(ctx, s.rdb, s.keys(h.ShowID), args(head, h.Seats)...).Int()
	err = s.seen(err)
	if err != nil {
		return 0, fmt.Errorf("redisseat: %s %s: %w", op, h.OrderNo, err)
	}
	return n, nil
}

func parseValue(v string) (cancel.SeatState, bool) {
	parts := strings.Split(v, "|")
	switch {
	case (len(parts) == 4 || len(parts) == 5) && parts[0] == "L":
		ms, err := strconv.ParseInt(parts[3], 10, 64)
		if err != nil {
			return cancel.SeatState{}, false
		}
		id := parts[3] // a value written before the generation (see scripts.go)
		if len(parts) == 5 {
			if _, err := strconv.ParseUint(parts[4], 10, 64); err != nil {
				return cancel.SeatState{}, false
			}
			id += "." + parts[4]
		}
		return cancel.SeatState{Status: cancel.SeatLocked, OrderNo: parts[1], UserID: parts[2], LockedAt: time.UnixMilli(ms).UTC(), LockID: id}, true
	case len(parts) == 3 && parts[0] == "S":
		return cancel.SeatState{Status: cancel.SeatSold, OrderNo: parts[1], UserID: parts[2]}, true
	}
	return cancel.SeatState{}, false
}

// Show returns every seat of show that is locked or sold. Values this
// package did not write are skipped. It reads the whole hash: for checks and
// tests, not for a hot path.
func (s *Seats) Show(ctx context.Context, show string) (map[string]cancel.SeatState, error) {
	if err := expiry.ValidateID("show id", show); err != nil {
		return nil, fmt.Errorf("redisseat: %w", err)
	}
	all, err := s.rdb.HGetAll(ctx, s.seatsKey(show)).Result()
	err = s.seen(err)
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
	err = s.seen(err)
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redisseat: held %s/%s: %w", show, user, err)
	}
	return n, nil
}

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

// ScanLocks implements reconcile.Seats: the seat locks of every listed
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

// Lost implements reconcile.Seats. It reports whether the
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

// MarkRestored implements reconcile.Seats: it records that the
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

// Restore implements reconcile.Seats: it gives free seats the state of
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
// reconcile.Seats.
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

// Check verifies at startup that Redis will not silently drop seat state:
// it reads maxmemory-policy (on every node of a cluster) and returns an error
// wrapping ErrEvictingPolicy for the allkeys-* policies, which evict keys
// without a TTL, such as a show's seats, under memory pressure. noeviction
// and the volatile-* policies are fine (the package sets no TTL). Where
// CONFIG is refused (managed services such as ElastiCache or Memorystore
// rename or forbid it, ACLs may deny it) Check cannot tell and returns nil:
// set the policy in the service's parameter group instead. Connection
// errors are returned.
func (s *Seats) Check(ctx context.Context) error {
	check := func(ctx context.Context, c redis.UniversalClient) error {
		cfg, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		var rerr redis.Error
		if errors.As(err, &rerr) {
			return nil // CONFIG refused: the server answered, with an error
		}
		if err != nil {
			return fmt.Errorf("redisseat: check: %w", err)
		}
		if p := cfg["maxmemory-policy"]; strings.HasPrefix(p, "allkeys-") {
			return fmt.Errorf("%w: maxmemory-policy is %s, which evicts keys without a TTL; use noeviction (or a volatile-* policy)", ErrEvictingPolicy, p)
		}
		return nil
	}
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return check(ctx, n) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return check(ctx, n) })
	default:
		return check(ctx, s.rdb)
	}
}
