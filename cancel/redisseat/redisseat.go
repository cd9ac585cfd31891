// Package redisseat keeps seat state in Redis (go-redis v9): which seats of a
// show are free, locked by a pending order, or sold, and how many seats each
// user holds (the purchase-limit counter). It implements cancel.SeatStore:
// Lock at placement, Release after a cancel, Sell after a payment, and the
// reconciler's lock scan and rebuild from SQL.
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
//
// # Names
//
// Seats and New: the seat store on a go-redis client (a single server,
// Sentinel or Cluster), its methods the interfaces of packages cancel and
// reconcile plus a host's reads and upkeep (Show, Held, RetireShow,
// Reindex, Check). DefaultNamespace: the key prefix when none is given.
// ErrShowHasLocks (RetireShow refused) and ErrEvictingPolicy (Check: a
// Redis that may evict seat keys) are the errors a host branches on.
package redisseat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
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

// Scope implements cancel.SeatStore: the scope given to Scoped ("" for New's).
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

// Lock implements cancel.SeatStore: it locks every seat of h for h.OrderNo
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

// Sell implements cancel.SeatStore: seats of h locked by h.OrderNo for
// h.UserID, or free, become sold to it; it returns how many. A seat locked
// by the same order number for another user is left alone, like another
// order's.
//
// The show is listed for the sold pass (ScanSold) in the same round trip:
// a seat sold while free (its lock lost with the server's data, which took
// the listing with it) is found by the sold pass like any other sale.
func (s *Seats) Sell(ctx context.Context, h cancel.Hold) (int, error) {
	if err := validateHold(h); err != nil {
		return 0, err
	}
	if len(h.Seats) == 0 {
		return 0, nil
	}
	keys, argv := s.keys(h.ShowID), args([]any{h.OrderNo, h.UserID, h.LockID}, h.Seats)
	pipe := s.rdb.Pipeline()
	listed := pipe.SAdd(ctx, s.soldShowsKey(), h.ShowID)
	run := sellScript.EvalSha(ctx, pipe, keys, argv...)
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	n, err := run.Int()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		n, err = sellScript.Run(ctx, s.rdb, keys, argv...).Int() // loads it
	}
	if err = s.seen(err); err != nil {
		return 0, fmt.Errorf("redisseat: sell %s: %w", h.OrderNo, err)
	}
	if lerr := s.seen(listed.Err()); lerr != nil && n > 0 {
		if lerr = s.seen(s.rdb.SAdd(ctx, s.soldShowsKey(), h.ShowID).Err()); lerr != nil {
			return n, fmt.Errorf("redisseat: sell %s: sold %d, listing the show for the sold pass: %w", h.OrderNo, n, lerr)
		}
	}
	return n, nil
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

var _ cancel.SeatStore = (*Seats)(nil)
