package soak

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// TestClusterFailover: the seat store on the Redis Cluster (three masters,
// a replica each) with the orders in MariaDB, under a load of placements,
// payments and cancels over shows spread on every master, while one master
// is SIGKILLed and its replica promoted (CLUSTER FAILOVER TAKEOVER). The
// replica is made to lack the master's last writes on purpose: it is
// SIGSTOPped and the master drops its link (CLIENT KILL TYPE replica), so
// every write from then to the kill is the master's alone; a scripted set of
// placements, payments and cancels in that window is lost with it. Then one
// reconcile round, and every seat of every show must be as SQL says (locked
// by its pending order, sold to its paid order, free otherwise), every
// purchase-limit counter exact. The killed master is started again (it
// rejoins as the promoted node's replica) and handed its slots back (CLUSTER
// FAILOVER), so the cluster ends as it began.
//
// The victim is the master holding the namespace's show list (<ns>:shows), so
// while it is down every placement fails (the seat store lists the show
// before it locks), and the promoted replica lacks the list's last writes too.
func TestClusterFailover(t *testing.T) {
	t.Parallel() // beside the cluster soaks, which use no Redis Cluster
	runClusterFailover(t, foScenario{figure: "cluster failover", how: "CLUSTER FAILOVER TAKEOVER", promote: promoteByTakeover})
}

// TestClusterAutomaticFailover is TestClusterFailover's scenario (the same
// load, the same replica cut off before the kill, so that it lacks the
// master's acknowledged last writes, the same checks) with the promotion
// left to the cluster: nobody sends CLUSTER FAILOVER. The replica runs again
// as soon as the master is dead; the two surviving masters (a majority of
// the three) flag the master FAIL after cluster-node-timeout (5 s here), the
// replica then starts an election and they vote it master of the slots. The
// replica was stopped for well under a second before the kill and its link
// went down at the kill, far inside cluster-replica-validity-factor (10 node
// timeouts), so it may stand. Between the FAIL flag and the promotion the
// cluster is down as a whole (cluster-require-full-coverage), so calls on
// every master may fail for that while; each is counted and left to the
// reconciler like the outage's.
func TestClusterAutomaticFailover(t *testing.T) {
	t.Parallel()
	runClusterFailover(t, foScenario{figure: "cluster automatic failover", how: "elected by the surviving masters, no CLUSTER FAILOVER sent", promote: awaitElection})
}

// failoverMu runs the failover tests one at a time (they are parallel to
// the cluster soaks, not to each other).
var failoverMu sync.Mutex

// foScenario is what differs between the failover tests: how the replica of
// the killed master becomes master.
type foScenario struct {
	figure string // the subject of the FIGURE lines
	how    string // how the replica was promoted, for the figures
	// promote runs right after the kill, with the replica still SIGSTOPped:
	// it resumes the replica (foOutage.resume), then has it promoted or
	// waits for the cluster to; it returns figures of its own to log.
	promote func(ctx context.Context, t *testing.T, o *foOutage) []string
}

// foOutage is what a promotion step has at hand: the killed master, its
// replica (stopped at the kill) and the nodes that survive.
type foOutage struct {
	masters, replicas []string
	victim            int
	rc                *redis.Client // the replica
	replicaPid        int
	killTime          time.Time
	replicaAt         int64 // the replica's offset once resumed: all it has of the master's stream
}

// resume lets the replica run again and waits until it has read whatever
// reached it before the cut and has seen its master go.
func (o *foOutage) resume(ctx context.Context, t *testing.T) {
	t.Helper()
	require.NoError(t, syscall.Kill(o.replicaPid, syscall.SIGCONT))
	require.NoError(t, waitUntil(ctx, 10*time.Second, func() error {
		info, err := o.rc.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "master_link_status:down") {
			return fmt.Errorf("the replica has not seen its master go: %v", err)
		}
		if off := replOffset(ctx, o.rc); off != o.replicaAt {
			o.replicaAt = off
			return errors.New("the replica is still reading")
		}
		return nil
	}))
}

// promoteByTakeover: nothing serves the victim's slots for 1.5 s, then the
// replica is resumed and takes them over (CLUSTER FAILOVER TAKEOVER, no
// election). The replica stays stopped for less than the node timeout in all.
func promoteByTakeover(ctx context.Context, t *testing.T, o *foOutage) []string {
	time.Sleep(1500 * time.Millisecond)
	o.resume(ctx, t)
	require.NoError(t, o.rc.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err())
	return nil
}

// awaitElection resumes the replica as soon as the killed master's port is
// closed (the replica cannot reconnect and resync the lost window), then
// only watches: it waits, with a deadline, until a surviving master flags
// the victim FAIL, and counts the replica's election messages.
func awaitElection(ctx context.Context, t *testing.T, o *foOutage) []string {
	require.NoError(t, waitUntil(ctx, 5*time.Second, func() error {
		c, err := net.DialTimeout("tcp", o.masters[o.victim], 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return errors.New("the killed master's port still accepts")
		}
		return nil
	}))
	o.resume(ctx, t)
	resumed := time.Since(o.killTime)
	authBefore := clusterStat(ctx, o.rc, "cluster_stats_messages_auth-req_sent")
	acksBefore := clusterStat(ctx, o.rc, "cluster_stats_messages_auth-ack_received")
	var failTime time.Time
	var flaggedBy string
	require.NoError(t, waitUntil(ctx, time.Until(o.killTime.Add(30*time.Second)), func() error {
		for i, m := range o.masters {
			if i == o.victim {
				continue
			}
			if flags, err := nodeFlags(ctx, m, o.masters[o.victim]); err == nil && slices.Contains(flags, "fail") {
				failTime, flaggedBy = time.Now(), m
				return nil
			}
		}
		return errors.New("no surviving master flags the victim FAIL yet")
	}), "the surviving masters flag the killed master FAIL after cluster-node-timeout")
	// The election itself: the replica asks for votes, a majority grant them.
	var authSent, acks int64
	require.NoError(t, waitUntil(ctx, time.Until(o.killTime.Add(30*time.Second)), func() error {
		if info, err := o.rc.Info(ctx, "replication").Result(); err != nil || !strings.Contains(info, "role:master") {
			return fmt.Errorf("not elected yet: %v", err)
		}
		return nil
	}), "the replica is elected")
	electedTime := time.Now()
	// The votes it won by: the counters are read after the win, and a vote
	// read a moment before it may be the one that decided.
	_ = waitUntil(ctx, 2*time.Second, func() error {
		authSent = clusterStat(ctx, o.rc, "cluster_stats_messages_auth-req_sent") - authBefore
		if acks = clusterStat(ctx, o.rc, "cluster_stats_messages_auth-ack_received") - acksBefore; acks < 2 {
			return fmt.Errorf("%d votes", acks)
		}
		return nil
	})
	assert.Positive(t, authSent, "the replica was elected: it asked the masters for their votes")
	assert.GreaterOrEqual(t, acks, int64(2), "a majority of the three masters voted for it")
	return []string{fmt.Sprintf("the replica resumed %.2f s after the kill; %s flagged the master FAIL %.2f s after the kill (cluster-node-timeout 5 s); the replica then sent %d vote-request messages (one per other node for an election), was granted %d votes of the 2 surviving masters and was master %.2f s after the kill",
		resumed.Seconds(), flaggedBy, failTime.Sub(o.killTime).Seconds(), authSent, acks, electedTime.Sub(o.killTime).Seconds())}
}

// runClusterFailover is the failover tests' scenario, sc.promote making the
// replica of the killed master a master.
func runClusterFailover(t *testing.T, sc foScenario) {
	// The failover tests kill masters of the one Redis Cluster: one at a
	// time, each leaving the cluster whole for the next.
	failoverMu.Lock()
	t.Cleanup(failoverMu.Unlock)

	t0 := time.Now()
	db := testenv.MySQL(t)
	testenv.RedisCluster(t) // a healthy cluster, or skip/fail
	replicas := testenv.RedisClusterReplicas(t)
	svcs := testenv.ServicesScript(t)
	masters := splitAddrs(os.Getenv(testenv.EnvCluster))
	require.Len(t, replicas, len(masters))
	ctx, cancelAll := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancelAll()
	require.NoError(t, waitUntil(ctx, 15*time.Second, func() error { return clusterAsStarted(ctx, masters, replicas) }),
		"the cluster must start as services.sh made it")

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: masters, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer cc.Close()
	store, err := sqlstore.New(db, sqlstore.MySQL)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	ns := "oe-fo-" + testenv.Unique()
	seats, err := redisseat.New(cc, ns)
	require.NoError(t, err)
	obs := &failObserver{failed: map[string]string{}}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, OnDiscrepancy: func(context.Context, cancel.Discrepancy) error { return nil },
		PlaceTimeout: 2 * time.Second, Runtime: expiry.Runtime{Observer: obs}})
	require.NoError(t, err)
	const grace = 4 * time.Second // above PlaceTimeout: a lock whose order is missing after it is abandoned
	// The round after the failover must find the seat steps the outage failed
	// past the settle time (orders decided moments ago are their decider's).
	const settle = 2 * time.Second
	rec, err := reconcile.New(reconcile.Config{Orders: store, Seats: seats, Service: svc, Grace: grace, Settle: settle,
		Runtime: expiry.Runtime{Observer: obs}})
	require.NoError(t, err)

	// Four shows per master; the victim is the master of the show list.
	perMaster := make([][]string, len(masters))
	var shows []string
	for i := 0; slices.ContainsFunc(perMaster, func(s []string) bool { return len(s) < 4 }); i++ {
		show := fmt.Sprintf("s%02d", i)
		m := masterIndex(ctx, t, cc, masters, ns+":{"+show+"}:seats")
		if len(perMaster[m]) < 4 {
			perMaster[m] = append(perMaster[m], show)
			shows = append(shows, show)
		}
	}
	victim := masterIndex(ctx, t, cc, masters, ns+":shows")
	victimAddr, promotedAddr := masters[victim], replicas[victim]
	onVictim := map[string]bool{}
	for _, s := range perMaster[victim] {
		onVictim[s] = true
	}
	t.Logf("shows per master %v; victim %s (holds %s:shows), its replica %s", perMaster, victimAddr, ns, promotedAddr)

	// Whatever happens below, the cluster is put back: the replica running,
	// the victim started again and master of its slots, its replica following.
	replicaPid, err := svcs.Pid("redis-cluster-" + port(promotedAddr))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = syscall.Kill(replicaPid, syscall.SIGCONT)
		t1 := time.Now()
		if err := restoreCluster(context.Background(), t, svcs, masters, replicas, victim); err != nil {
			t.Errorf("the cluster was not put back as it was: %v", err)
			return
		}
		t.Logf("FIGURE %s: the killed master restarted, rejoined as the promoted node's replica, resynced and took its slots back (CLUSTER FAILOVER) in %.1f s; the cluster ok with 3 masters and a replica each", sc.figure, time.Since(t1).Seconds())
	})

	// The first round writes the store's marker, before any replica is cut.
	_, err = rec.Round(ctx)
	require.NoError(t, err)

	ld := &foLoad{svc: svc, store: store, db: db, shows: shows, limit: 6,
		rng: rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano()))), tally: map[string]int{}, errs: map[string]string{}}
	// Every show gets long orders first, so every show keeps locks (and stays listed).
	for _, show := range shows {
		for range 3 {
			ld.place(ctx, "steady", show, "", nil, true, true)
		}
	}
	reserved := ld.reserve(ctx, perMaster[victim])
	require.Len(t, reserved, 6)
	phase := atomic.Value{}
	phase.Store("steady")
	stopLoad := make(chan struct{})
	var loadWG sync.WaitGroup
	for range 3 {
		loadWG.Go(func() { ld.run(ctx, &phase, stopLoad) })
	}
	recCtx, stopRec := context.WithCancel(ctx)
	recDone := make(chan struct{})
	go func() { defer close(recDone); _ = rec.Run(recCtx, time.Second) }() // the reconciler, until the cut
	time.Sleep(3 * time.Second)
	stopRec()
	<-recDone

	// The victim's shard holds locked seats.
	victimLocks := 0
	for _, show := range perMaster[victim] {
		st, err := seats.Show(ctx, show)
		require.NoError(t, err)
		for _, s := range st {
			if s.Status == cancel.SeatLocked {
				victimLocks++
			}
		}
	}
	require.Positive(t, victimLocks)

	// The cut: the replica has all the master has, then is stopped and
	// dropped by the master; nothing the master writes from now reaches it.
	vc := redis.NewClient(&redis.Options{Addr: victimAddr, DialTimeout: time.Second})
	defer vc.Close()
	rc := redis.NewClient(&redis.Options{Addr: promotedAddr, DialTimeout: time.Second})
	defer rc.Close()
	require.NoError(t, waitUntil(ctx, 20*time.Second, func() error {
		if m, r := replOffset(ctx, vc), replOffset(ctx, rc); m == 0 || r < m {
			return fmt.Errorf("replica at %d of %d", r, m)
		}
		return nil
	}), "the replica catches up before the cut")
	phase.Store("cut")
	require.NoError(t, syscall.Kill(replicaPid, syscall.SIGSTOP))
	require.NoError(t, vc.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err())
	require.NoError(t, waitUntil(ctx, 5*time.Second, func() error {
		if info, _ := vc.Info(ctx, "replication").Result(); !strings.Contains(info, "connected_slaves:0") {
			return errors.New("the replica is still connected")
		}
		return nil
	}))
	cutAt := replOffset(ctx, vc)
	cutTime := time.Now()

	// The window's scripted writes, all on the victim's shows: new orders
	// (locks lost), payments and cancels of older pending orders (sales and
	// releases lost), and orders placed and paid (sales of free seats lost).
	lost := ld.window(ctx, perMaster[victim], reserved)
	time.Sleep(500 * time.Millisecond) // the load's own writes in the window
	t.Logf("window: %d placed, %d paid, %d cancelled, %d placed and paid on %s", len(lost.placed), len(lost.paid), len(lost.cancelled), len(lost.placedPaid), victimAddr)
	require.Len(t, lost.placed, 4)
	require.Len(t, lost.placedPaid, 2)
	require.Len(t, lost.paid, 3)
	require.Len(t, lost.cancelled, 3)

	// The kill, then the promotion of the replica, which lacks the window.
	victimPid, err := svcs.Pid("redis-cluster-" + port(victimAddr))
	require.NoError(t, err)
	killAt := replOffset(ctx, vc)
	phase.Store("outage")
	require.NoError(t, syscall.Kill(victimPid, syscall.SIGKILL))
	out := &foOutage{masters: masters, replicas: replicas, victim: victim, rc: rc, replicaPid: replicaPid, killTime: time.Now()}
	killTime := out.killTime
	notes := sc.promote(ctx, t, out)
	replicaAt := out.replicaAt
	// The promotion is done when the replica is a master and every live
	// node routes the victim's slots to it and sees the cluster ok.
	slot, err := rc.ClusterKeySlot(ctx, ns+":{"+perMaster[victim][0]+"}:seats").Result()
	require.NoError(t, err)
	require.NoError(t, waitUntil(ctx, time.Until(killTime.Add(30*time.Second)), func() error {
		info, err := rc.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "role:master") {
			return fmt.Errorf("not promoted yet: %v", err)
		}
		for i, a := range slices.Concat(masters, replicas) {
			if i == victim {
				continue
			}
			if got, err := slotOwner(ctx, a, slot); err != nil || got != promotedAddr {
				return fmt.Errorf("%s routes slot %d to %s (%v)", a, slot, got, err)
			}
		}
		return nil
	}), "the replica promoted within 30 s of the kill")
	promoteTime := time.Now()
	// The seat store follows at once: after at most a call or two that fail
	// against the killed node, its calls reach the promoted one.
	var stale []string
	servedTime := time.Time{}
	for range 5 {
		if _, err := seats.Show(ctx, perMaster[victim][0]); err == nil {
			servedTime = time.Now()
			break
		} else {
			stale = append(stale, err.Error())
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Less(t, len(stale), 3, "the seat store still addresses the killed master after the promotion: %q", stale)
	phase.Store("after")
	time.Sleep(1500 * time.Millisecond)
	close(stopLoad)
	loadWG.Wait()
	loadStopped := time.Now()
	t.Logf("%s cut, %.1f s later killed, promoted %.1f s after the kill; %d bytes of the master's stream never reached the replica",
		cutTime.Format("15:04:05.000"), killTime.Sub(cutTime).Seconds(), promoteTime.Sub(killTime).Seconds(), killAt-replicaAt)
	assert.Greater(t, killAt, cutAt, "the master wrote after the cut")
	assert.Positive(t, killAt-replicaAt, "the promoted replica lacks the master's last writes")

	// Every placement's lock has committed or is older than the grace
	// period, every short order is due, every decision older than the
	// settle time: what Redis lacks now is the loss.
	time.Sleep(max(time.Until(ld.lastPlace().Add(grace+500*time.Millisecond)), time.Until(ld.lastDue().Add(500*time.Millisecond)),
		time.Until(loadStopped.Add(settle+200*time.Millisecond))))
	before, err := compare(ctx, store, seats, shows, ld.users())
	require.NoError(t, err)
	// Each scripted write of the window is missing on the promoted replica.
	for _, o := range lost.placed {
		assert.Contains(t, before.lockMissing, o.no, "the lock of %s, placed in the window, is lost", o.no)
	}
	for _, o := range lost.paid {
		assert.Contains(t, before.saleMissing, o.no, "the sale of %s, paid in the window, is lost (its seats still locked)", o.no)
	}
	for _, o := range lost.cancelled {
		assert.Contains(t, before.staleLock, o.no, "the release of %s, cancelled in the window, is lost", o.no)
	}
	for _, o := range lost.placedPaid {
		assert.Contains(t, before.saleMissing, o.no, "the sale of %s, placed and paid in the window, is lost", o.no)
	}

	// One reconcile round repairs it all.
	final, err := rec.Round(ctx)
	require.NoError(t, err)
	after, err := compare(ctx, store, seats, shows, ld.users())
	require.NoError(t, err)
	for _, v := range after.violations {
		t.Error(v)
	}
	assert.Zero(t, after.seats, "seats that differ from SQL after one round")
	assert.Zero(t, after.counters, "counters that differ from SQL after one round")
	assert.GreaterOrEqual(t, final.Restored, 2*len(lost.placed)+2*len(lost.placedPaid), "the claims pass put back the lost locks and sales of free seats")
	assert.GreaterOrEqual(t, final.Sold, 2*len(lost.paid), "the lock pass sold the seats of orders paid in the window")
	assert.GreaterOrEqual(t, final.Released, 2*len(lost.cancelled), "the lock pass released the seats of orders cancelled in the window")

	// What every call answered agrees with SQL.
	for _, v := range ld.check(ctx, t) {
		t.Error(v)
	}
	obs.mu.Lock()
	sellFailed, releaseFailed := obs.kinds[expiry.KindSellFailed], obs.kinds[expiry.KindReleaseFailed]
	obs.mu.Unlock()
	ld.mu.Lock()
	tally := fmt.Sprint(ld.tally)
	nOrders := len(ld.orders)
	errSamples := ld.errs
	outage := map[string]int{}
	for what, n := range ld.tally {
		if rest, ok := strings.CutPrefix(what, "outage "); ok {
			outage[rest] += n
		}
	}
	ld.mu.Unlock()
	// Each difference before the round is the promoted replica's loss (an
	// order of the victim's shows) or a seat-store step that failed during
	// the outage and was counted.
	byNo := map[string]*foOrder{}
	ld.mu.Lock()
	for _, o := range ld.orders {
		byNo[o.no] = o
	}
	ld.mu.Unlock()
	cause := map[string]int{}
	for _, no := range slices.Concat(before.lockMissing, before.saleMissing, before.staleLock) {
		obs.mu.Lock()
		failedKind := obs.failed[no]
		obs.mu.Unlock()
		switch o := byNo[no]; {
		case failedKind != "":
			cause[failedKind+" during the outage"]++
		case o != nil && onVictim[o.show]:
			cause["lost by the promoted replica"]++
		default:
			cause["unexplained"]++
			t.Errorf("order %s differs between Redis and SQL before the round, neither lost by the replica nor a counted failure", no)
		}
	}
	assert.Empty(t, ld.unclear, "a placement that failed must say it was the seat store's lock of that order")
	for what, n := range ld.tally {
		assert.False(t, strings.HasSuffix(what, "pay failed") || strings.HasSuffix(what, "cancel failed"),
			"%d calls %q: a payment or cancel is decided in SQL, the seat store's step is left to the reconciler", n, what)
	}
	for class, e := range errSamples {
		t.Logf("an error of %s: %s", class, e)
	}
	t.Logf("FIGURE %s: %d orders on %d shows over 3 masters; calls by phase and answer %s; %d payments and %d cancels whose seat-store step failed during the outage (counted, left to the reconciler)",
		sc.figure, nOrders, len(shows), tally, sellFailed, releaseFailed)
	t.Logf("FIGURE %s: master %s SIGKILLed %.1f s after its replica %s was cut off (%d locked seats on its shard); %d bytes of its stream never reached the replica; promoted (%s) %.2f s after the kill",
		sc.figure, victimAddr, killTime.Sub(cutTime).Seconds(), promotedAddr, victimLocks, killAt-replicaAt, sc.how, promoteTime.Sub(killTime).Seconds())
	for _, n := range notes {
		t.Logf("FIGURE %s: %s", sc.figure, n)
	}
	t.Logf("FIGURE %s: from the kill to every live node routing the victim's slots to the promoted replica %.2f s, to the seat store's first call served by it %.2f s; in that outage %d placements failed (%d ok, %d refused), %d payments and %d cancels answered ok",
		sc.figure, promoteTime.Sub(killTime).Seconds(), servedTime.Sub(killTime).Seconds(), outage["place failed"], outage["place ok"], outage["place refused"], outage["pay ok"], outage["cancel ok"])
	t.Logf("FIGURE %s: before the round, Redis differed from SQL in %d seats: %d locks of pending orders missing (%d orders), %d sales missing (%d orders), %d locks of ended orders left (%d orders), %d counters off; in the window %d orders placed, %d paid, %d cancelled, %d placed and paid on the victim's shows, all among them",
		sc.figure, before.seats, before.lockSeats, len(before.lockMissing), before.saleSeats, len(before.saleMissing), before.staleSeats, len(before.staleLock), before.counters,
		len(lost.placed), len(lost.paid), len(lost.cancelled), len(lost.placedPaid))
	t.Logf("FIGURE %s: the differing orders by cause: %v", sc.figure, cause)
	t.Logf("FIGURE %s: one reconcile round %+v; after it %d seats and %d counters differ from SQL; test %.1f s",
		sc.figure, final, after.seats, after.counters, time.Since(t0).Seconds())
}

// clusterStat is the named counter of the node's CLUSTER INFO, 0 if absent.
func clusterStat(ctx context.Context, c *redis.Client, name string) int64 {
	ci, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(ci, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// nodeFlags is the flags (myself, master, fail?, fail, ...) the node at addr
// gives node in its CLUSTER NODES.
func nodeFlags(ctx context.Context, addr, node string) ([]string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	nodes, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(nodes, "\n") {
		if f := strings.Fields(line); len(f) > 2 && strings.HasPrefix(f[1], node+"@") {
			return strings.Split(f[2], ","), nil
		}
	}
	return nil, fmt.Errorf("%s does not know %s", addr, node)
}

// failObserver counts the cancel service's events by kind.
type failObserver struct {
	mu     sync.Mutex
	kinds  map[expiry.Kind]int
	failed map[string]string // order -> the failed kind
}

func (o *failObserver) Observe(_ context.Context, ev expiry.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.kinds == nil {
		o.kinds = map[expiry.Kind]int{}
	}
	o.kinds[ev.Kind]++
	if ev.Kind == expiry.KindSellFailed || ev.Kind == expiry.KindReleaseFailed {
		o.failed[ev.OrderNo] = ev.Kind.String()
	}
}

// foOrder is the load's ledger of one order.
type foOrder struct {
	no, user, show string
	seats          []string
	expire         time.Time
	placed         int  // 1 ok, 2 refused (seat, limit), 3 failed
	paid           bool // Pay answered nil
	cancelled      bool // UserCancel cancelled it
}

type foLoad struct {
	svc   *cancel.Service
	store *sqlstore.Store
	db    *sql.DB
	shows []string
	limit int

	mu      sync.Mutex
	rng     *rand.Rand
	n       int
	orders  []*foOrder
	pending []*foOrder // placed, not yet paid or cancelled by the load
	tally   map[string]int
	errs    map[string]string // one error per class, for the log
	placeAt time.Time
	dueAt   time.Time
	unclear []string // failed calls whose error does not say what failed
}

func (l *foLoad) count(phase, what string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tally[phase+" "+what]++
	if err != nil {
		if _, ok := l.errs[what]; !ok {
			l.errs[what] = err.Error()
		}
	}
}

func (l *foLoad) lastPlace() time.Time { l.mu.Lock(); defer l.mu.Unlock(); return l.placeAt }
func (l *foLoad) lastDue() time.Time   { l.mu.Lock(); defer l.mu.Unlock(); return l.dueAt }

func (l *foLoad) users() []string {
	var us []string
	for u := range 12 {
		us = append(us, fmt.Sprintf("u%d", u))
	}
	return append(us, "uw", "uv")
}

// place places one order of two seats in show, for a random user and two
// random seats A00-A39 unless given: due in 2-4 s, or in 10 minutes (long:
// still pending at the end, its seats locked). pool: the load may pay or
// cancel it later.
func (l *foLoad) place(ctx context.Context, phase, show, user string, seats []string, long, pool bool) *foOrder {
	l.mu.Lock()
	l.n++
	o := &foOrder{no: fmt.Sprintf("fo-%05d", l.n), show: show, user: user, seats: seats}
	if user == "" {
		o.user = fmt.Sprintf("u%d", l.rng.IntN(12))
	}
	if seats == nil {
		a := l.rng.IntN(40)
		b := (a + 1 + l.rng.IntN(39)) % 40
		o.seats = []string{fmt.Sprintf("A%02d", a), fmt.Sprintf("A%02d", b)}
	}
	o.expire = time.Now().Add(2*time.Second + time.Duration(l.rng.IntN(2000))*time.Millisecond)
	if long {
		o.expire = time.Now().Add(10 * time.Minute)
	}
	l.orders = append(l.orders, o)
	l.mu.Unlock()
	p := cancel.Placement{OrderNo: o.no, UserID: o.user, ShowID: o.show, Seats: o.seats, ExpireAt: o.expire, Limit: l.limit}
	err := l.svc.Place(ctx, p, l.store.Insert(l.db, nil))
	l.mu.Lock()
	l.placeAt = time.Now()
	if !long && o.expire.After(l.dueAt) {
		l.dueAt = o.expire
	}
	l.mu.Unlock()
	switch {
	case err == nil:
		o.placed = 1
		if pool {
			l.mu.Lock()
			l.pending = append(l.pending, o)
			l.mu.Unlock()
		}
		l.count(phase, "place ok", nil)
	case errors.Is(err, cancel.ErrSeatUnavailable) || errors.Is(err, cancel.ErrLimitExceeded):
		o.placed = 2
		l.count(phase, "place refused", nil)
	default:
		o.placed = 3
		l.count(phase, "place failed", err)
		if !strings.Contains(err.Error(), "redisseat: lock "+o.no+": ") {
			l.mu.Lock()
			l.unclear = append(l.unclear, err.Error())
			l.mu.Unlock()
		}
	}
	return o
}

// take removes a random order from the pending ones the load may act on.
func (l *foLoad) take() *foOrder {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) == 0 {
		return nil
	}
	i := l.rng.IntN(len(l.pending))
	o := l.pending[i]
	l.pending = slices.Delete(l.pending, i, i+1)
	return o
}

func (l *foLoad) pay(ctx context.Context, phase string, o *foOrder) {
	res, err := l.svc.Pay(ctx, cancel.Payment{OrderNo: o.no, PaymentID: "p-" + o.no})
	switch {
	case err == nil && res.Order.Status == expiry.StatusPaid:
		o.paid = true
		l.count(phase, "pay ok", nil)
	case errors.Is(err, cancel.ErrDiscrepancy):
		l.count(phase, "pay refused (cancelled first)", nil)
	default:
		l.count(phase, "pay failed", err)
	}
}

func (l *foLoad) cancel(ctx context.Context, phase string, o *foOrder) {
	res, err := l.svc.UserCancel(ctx, o.no, o.user)
	switch {
	case err == nil && res.Changed:
		o.cancelled = true
		l.count(phase, "cancel ok", nil)
	case err == nil:
		l.count(phase, "cancel found it decided", nil)
	default:
		l.count(phase, "cancel failed", err)
	}
}

// run is one lane of the load until stop: placements (a fifth of them long),
// payments and user cancels of pending orders, on every show.
func (l *foLoad) run(ctx context.Context, phase *atomic.Value, stop chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(40 * time.Millisecond):
		}
		ph := phase.Load().(string)
		l.mu.Lock()
		r := l.rng.Float64()
		show := l.shows[l.rng.IntN(len(l.shows))]
		long := l.rng.IntN(5) == 0
		l.mu.Unlock()
		switch {
		case r < 0.6:
			l.place(ctx, ph, show, "", nil, long, true)
		case r < 0.8:
			if o := l.take(); o != nil {
				l.pay(ctx, ph, o)
			}
		default:
			if o := l.take(); o != nil {
				l.cancel(ctx, ph, o)
			}
		}
	}
}

type windowWrites struct{ placed, paid, cancelled, placedPaid []*foOrder }

// reserve places, before the cut, the long orders the window will pay and
// cancel: on the victim's shows, seats R00-R11 and user "uw", which the load
// never uses, so none is refused or taken by the load.
func (l *foLoad) reserve(ctx context.Context, shows []string) []*foOrder {
	var out []*foOrder
	for i := range 6 {
		o := l.place(ctx, "steady", shows[i%len(shows)], "uw", []string{fmt.Sprintf("R%02d", 2*i), fmt.Sprintf("R%02d", 2*i+1)}, true, false)
		if o.placed == 1 {
			out = append(out, o)
		}
	}
	return out
}

// window writes what the promoted replica will lack, on the victim's shows:
// long orders placed (seats W.., user "uv"), reserved ones paid and
// cancelled, orders placed and paid at once.
func (l *foLoad) window(ctx context.Context, shows []string, reserved []*foOrder) windowWrites {
	var w windowWrites
	for i := range 6 {
		o := l.place(ctx, "cut", shows[i%len(shows)], "uv", []string{fmt.Sprintf("W%02d", 2*i), fmt.Sprintf("W%02d", 2*i+1)}, true, false)
		switch {
		case o.placed != 1:
		case i%3 == 2:
			if l.pay(ctx, "cut", o); o.paid {
				w.placedPaid = append(w.placedPaid, o)
			}
		default: // left pending to the end
			w.placed = append(w.placed, o)
		}
	}
	for i, o := range reserved {
		if i%2 == 0 {
			if l.pay(ctx, "cut", o); o.paid {
				w.paid = append(w.paid, o)
			}
		} else if l.cancel(ctx, "cut", o); o.cancelled {
			w.cancelled = append(w.cancelled, o)
		}
	}
	return w
}

// check compares what every call answered with SQL.
func (l *foLoad) check(ctx context.Context, t *testing.T) []string {
	var bad []string
	l.mu.Lock()
	orders := slices.Clone(l.orders)
	l.mu.Unlock()
	for _, o := range orders {
		got, err := l.store.Order(ctx, o.no)
		inSQL := err == nil
		if err != nil && !errors.Is(err, expiry.ErrNotFound) {
			t.Fatalf("order %s: %v", o.no, err)
		}
		switch {
		case o.placed == 1 && !inSQL:
			bad = append(bad, fmt.Sprintf("I1: %s was placed but is not in SQL", o.no))
		case o.placed != 1 && inSQL:
			bad = append(bad, fmt.Sprintf("%s: placement answered an error (%d) but the order is in SQL", o.no, o.placed))
		case o.paid && got.Status != expiry.StatusPaid:
			bad = append(bad, fmt.Sprintf("I1: %s: payment answered ok, status %v", o.no, got.Status))
		case o.cancelled && got.Status != expiry.StatusCancelled:
			bad = append(bad, fmt.Sprintf("I1: %s: cancel answered ok, status %v", o.no, got.Status))
		case inSQL && got.Status == expiry.StatusPending && time.Until(o.expire) < time.Minute:
			bad = append(bad, fmt.Sprintf("I3: %s still pending after the round, due %v ago", o.no, time.Since(o.expire)))
		}
	}
	return bad
}

// diff is how the seat store differs from SQL's claims.
type diff struct {
	lockMissing, saleMissing, staleLock []string // orders
	lockSeats, saleSeats, staleSeats    int
	seats, counters                     int
	violations                          []string
}

// compare reads every show's seats and the users' counters and compares them
// with SQL: a pending order's seats locked by it, a paid order's sold to it,
// no other seat locked or sold, each counter the user's seats in pending and
// paid orders of the show.
func compare(ctx context.Context, store *sqlstore.Store, seats *redisseat.Seats, shows, users []string) (diff, error) {
	var d diff
	want := map[[2]string]cancel.Claim{} // show, seat
	held := map[[2]string]int{}          // show, user
	for cursor := ""; ; {
		cs, next, err := store.Claims(ctx, cursor, 500)
		if err != nil {
			return d, err
		}
		for _, c := range cs {
			want[[2]string{c.ShowID, c.SeatID}] = c
			held[[2]string{c.ShowID, c.UserID}]++
		}
		if cursor = next; next == "" {
			break
		}
	}
	add := func(list *[]string, no string) {
		if !slices.Contains(*list, no) {
			*list = append(*list, no)
		}
	}
	for _, show := range shows {
		got, err := seats.Show(ctx, show)
		if err != nil {
			return d, err
		}
		for seat, w := range want {
			if seat[0] != show {
				continue
			}
			g, ok := got[seat[1]]
			switch {
			case w.Status == expiry.StatusPending && (!ok || g.Status != cancel.SeatLocked || g.OrderNo != w.OrderNo || g.UserID != w.UserID):
				d.lockSeats++
				add(&d.lockMissing, w.OrderNo)
				d.violations = append(d.violations, fmt.Sprintf("I2: seat %s/%s should be locked by pending %s, Redis has %+v", show, seat[1], w.OrderNo, g))
			case w.Status == expiry.StatusPaid && (!ok || g.Status != cancel.SeatSold || g.OrderNo != w.OrderNo || g.UserID != w.UserID):
				d.saleSeats++
				add(&d.saleMissing, w.OrderNo)
				d.violations = append(d.violations, fmt.Sprintf("I2: seat %s/%s should be sold to paid %s, Redis has %+v", show, seat[1], w.OrderNo, g))
			}
		}
		for seat, g := range got {
			if _, ok := want[[2]string{show, seat}]; !ok {
				d.staleSeats++
				add(&d.staleLock, g.OrderNo)
				d.violations = append(d.violations, fmt.Sprintf("I2: seat %s/%s is held in Redis (%+v) but claimed by no pending or paid order", show, seat, g))
			}
		}
		for _, u := range users {
			n, err := seats.Held(ctx, show, u)
			if err != nil {
				return d, err
			}
			if w := held[[2]string{show, u}]; n != w {
				d.counters++
				d.violations = append(d.violations, fmt.Sprintf("I8: counter of %s in %s is %d, SQL says %d", u, show, n, w))
			}
		}
	}
	d.seats = d.lockSeats + d.saleSeats + d.staleSeats
	sort.Strings(d.violations)
	return d, nil
}

// slotOwner is the master that the node at addr routes slot to; an error
// while the node sees the cluster down (it would answer CLUSTERDOWN).
func slotOwner(ctx context.Context, addr string, slot int64) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	if ci, err := c.ClusterInfo(ctx).Result(); err != nil || !strings.Contains(ci, "cluster_state:ok") {
		return "", fmt.Errorf("cluster state not ok (%v)", err)
	}
	ranges, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("slot %d unassigned", slot)
}

// masterIndex is the index in masters of the master serving key.
func masterIndex(ctx context.Context, t *testing.T, cc *redis.ClusterClient, masters []string, key string) int {
	t.Helper()
	c, err := cc.MasterForKey(ctx, key)
	require.NoError(t, err)
	i := slices.Index(masters, c.Options().Addr)
	require.GreaterOrEqual(t, i, 0, "the master of %s, %s, is not one of %v", key, c.Options().Addr, masters)
	return i
}

func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// waitUntil retries cond every 100 ms until it returns nil, for at most d.
func waitUntil(ctx context.Context, d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("after %v: %w", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clusterAsStarted reports nil when every node says cluster_state:ok, each
// of masters is a master and replicas[i] follows masters[i] with its link up,
// and every node's CLUSTER NODES says so too (gossip lags a failover).
func clusterAsStarted(ctx context.Context, masters, replicas []string) error {
	for i, m := range masters {
		for _, a := range []string{m, replicas[i]} {
			c := redis.NewClient(&redis.Options{Addr: a, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
			ci, err := c.ClusterInfo(ctx).Result()
			info, err2 := c.Info(ctx, "replication").Result()
			nodes, err3 := c.ClusterNodes(ctx).Result()
			_ = c.Close()
			if err != nil || err2 != nil || err3 != nil {
				return fmt.Errorf("%s: %v %v %v", a, err, err2, err3)
			}
			if err := viewAsStarted(nodes, masters, replicas); err != nil {
				return fmt.Errorf("%s sees %w", a, err)
			}
			if !strings.Contains(ci, "cluster_state:ok") {
				return fmt.Errorf("%s: cluster state not ok", a)
			}
			if a == m && !strings.Contains(info, "role:master") {
				return fmt.Errorf("%s is not a master", a)
			}
			if a != m && (!strings.Contains(info, "role:slave") || !strings.Contains(info, "master_port:"+port(m)+"\r") || !strings.Contains(info, "master_link_status:up")) {
				return fmt.Errorf("%s does not follow %s with its link up", a, m)
			}
		}
	}
	return nil
}

// viewAsStarted reports nil when the CLUSTER NODES text lists each of
// masters as a master, replicas[i] as the replica of masters[i], none
// flagged failing.
func viewAsStarted(nodes string, masters, replicas []string) error {
	type node struct {
		id, master string
		flags      []string
	}
	byAddr := map[string]node{}
	for _, line := range strings.Split(nodes, "\n") {
		if f := strings.Fields(line); len(f) > 3 {
			addr, _, _ := strings.Cut(f[1], "@")
			byAddr[addr] = node{id: f[0], master: f[3], flags: strings.Split(f[2], ",")}
		}
	}
	for i, m := range masters {
		mn, rn := byAddr[m], byAddr[replicas[i]]
		switch {
		case mn.id == "" || rn.id == "":
			return fmt.Errorf("no node %s or %s", m, replicas[i])
		case slices.Contains(mn.flags, "fail") || slices.Contains(mn.flags, "fail?") || slices.Contains(rn.flags, "fail") || slices.Contains(rn.flags, "fail?"):
			return fmt.Errorf("%s %v, %s %v", m, mn.flags, replicas[i], rn.flags)
		case !slices.Contains(mn.flags, "master"):
			return fmt.Errorf("%s as %v", m, mn.flags)
		case !slices.Contains(rn.flags, "slave") || rn.master != mn.id:
			return fmt.Errorf("%s as %v of %s", replicas[i], rn.flags, rn.master)
		}
	}
	return nil
}

// restoreCluster starts the victim again (services.sh start-one: it rejoins
// as the promoted node's replica and resyncs from it), then hands it its
// slots back with a coordinated CLUSTER FAILOVER, and waits until the
// cluster is as services.sh made it.
func restoreCluster(ctx context.Context, t *testing.T, svcs testenv.Services, masters, replicas []string, victim int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if clusterAsStarted(ctx, masters, replicas) == nil {
		return nil
	}
	if err := svcs.StartOne(ctx, "redis-cluster-"+port(masters[victim])); err != nil {
		return err
	}
	vc := redis.NewClient(&redis.Options{Addr: masters[victim], DialTimeout: time.Second})
	defer vc.Close()
	// It comes back as a replica of the node that took its slots.
	if err := waitUntil(ctx, 60*time.Second, func() error {
		info, err := vc.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if strings.Contains(info, "role:master") {
			return clusterAsStarted(ctx, masters, replicas) // e.g. the test failed before the kill
		}
		if !strings.Contains(info, "master_link_status:up") {
			return errors.New("rejoined, not synced yet")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("%s did not rejoin as a replica: %w", masters[victim], err)
	}
	if clusterAsStarted(ctx, masters, replicas) == nil {
		return nil
	}
	t.Logf("%s rejoined as a replica; handing its slots back", masters[victim])
	if err := vc.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		return fmt.Errorf("CLUSTER FAILOVER on %s: %w", masters[victim], err)
	}
	return waitUntil(ctx, 60*time.Second, func() error { return clusterAsStarted(ctx, masters, replicas) })
}
