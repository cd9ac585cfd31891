package explore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// The world: two tenants on one seat store. Tenant 1 has the show the
// exploration is about (two orders, two seats, two users, two payment ids,
// two instances); tenant 2 has one order of its own, numbered like one of
// tenant 1's (each tenant has its own numbering), on its own show.
const (
	show1 = "show-1"
	show2 = "show-2"
	// limit is the purchase limit every placement is made with: one seat
	// per user and show, so that a second seat is a finding (I17).
	limit = 1
	// ttl is every order's payment window.
	ttl = 15 * time.Minute
	// settleAdvance moves the clock past the reconciler's Grace and Settle
	// and the discrepancy lease, so that nothing is left to the instance
	// that decided it.
	settleAdvance = cancel.DiscrepancyLeaseDefault + time.Second
)

// epoch is the fake clock's start.
var epoch = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

var (
	users = []string{"u1", "u2"}
	// payments are the payment ids and the order each pays: the provider
	// sends each id for its one order only, so an order paid is paid by its
	// id. Payment ids are per tenant (each has its own provider account):
	// tenant 2's pay-1 is another payment than tenant 1's, and every
	// ledger keys a payment by both (payment.key).
	payments = []payment{{1, "o1", "pay-1"}, {1, "o2", "pay-2"}, {2, "o1", "pay-1"}}
)

type payment struct {
	tenant    int
	order, id string
}

// key is the payment's key in the facts and ledgers: tenant and id.
func (p payment) key() string { return payKey(p.tenant, p.id) }

// orderKey is the key of the order it pays.
func (p payment) orderKey() string { return "t" + strconv.Itoa(p.tenant) + "/" + p.order }

func payKey(tn int, id string) string { return "t" + strconv.Itoa(tn) + "/" + id }

// fakeClock is the shared clock of the database and the seat store (both
// memstore clocks) and the components' Runtime clock. Only the explorer
// moves it, between steps (world.advance). On a backend with clocks of its
// own (SQL, Redis) it is the components' Runtime clock and the host's, and
// the stores' clocks are moved with it (see orderSide.shift).
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
	// back is how far the database's clock stepped back (world.stepBack):
	// memstore's order stores run on orderNow, the seat store and the
	// components on Now.
	back time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// orderNow is the order stores' clock on memstore: the database's.
func (c *fakeClock) orderNow() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now.Add(-c.back)
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// AfterFunc never fires: nothing here waits on a timer (Round is called by
// the explorer, never by Run).
func (c *fakeClock) AfterFunc(time.Duration, func()) func() bool { return func() bool { return true } }

// tenant is one tenant's wiring: its order store, its view of the seat
// store, and per instance a Service, a Reconciler and a Scheduler.
type tenant struct {
	// shared is the seat store the tenant's wiring uses: the one seat
	// store, or the tenant's scope of it.
	n      int
	show   string
	seats  []string
	store  orderStore
	insert insertFunc // the host's insert
	host   hostRows   // the host's own part on its rows (host steps)
	shared seatStore
	gstore *gatedStore
	gseats *gatedSeats
	svc    []*cancel.Service
	rec    []*reconcile.Reconciler
	sched  []*expiry.Scheduler
	// idle: no step of the scenario acts on this tenant (newWorld).
	idle bool
	// orderKeys and heldKeys are the observation's keys of the tenant's
	// orders (orderNos) and of its users' counters (users).
	orderKeys, heldKeys []string
}

// world is one fresh replay's universe.
type world struct {
	pool    *pool
	clk     *fakeClock
	backend backend
	seatNow func(context.Context) (time.Time, error)
	// err is the first failure of the world itself (a store that could not
	// be moved in time): the replay that met it fails.
	err error
	// realStart and realMark are when the world began and when its clock
	// last moved, by this process's clock, on a backend whose stores keep
	// their own clocks (see advance); zero on memstore.
	realStart, realMark time.Time
	drift               time.Duration // realMark - realStart
	tenants             []*tenant
	events              chan event
	ops                 []*op // every operation started, in order
	parked              map[int]*op
	running             *op // the operation being driven (at most one runs at a time)
	step                int // the step being run, for findings
	// fast: the steps run now replay a sequence (explorer.replay), whose
	// operations need not stop at the gates they pass (op.free).
	fast bool
	// lockNames numbers the lock ids the fingerprint met (fingerprint).
	lockNames map[string]int
	// empty puts the order stores back as newWorld made them (reset); nil
	// on a backend that cannot.
	empty []func()

	mu    sync.Mutex
	facts facts
	fp    uint64 // running fingerprint of every call, to check determinism
	// hooks says the order stores run the world's transition hook
	// (installHooks); hookDown, that it fails (the host's outbox is down).
	hooks, hookDown bool
	// letGo ends each hold of an order's row the host has (holdKind), by
	// order key.
	letGo map[string]func()
	// provider is the payment provider the Services ask (wireProvider,
	// provider_test.go); provNone in the scenarios without one.
	provider provModel
}

// errHookDown is the world's transition hook failing.
var errHookDown = errors.New("explore: the host's outbox is down")

// installHooks gives every tenant's order store the world's transition
// hook when kinds has a hook step, and takes it away otherwise (the SQL
// backends keep their stores from one world to the next). The hook writes
// its record (facts.hooked) unless its outage is on; it is the host's
// outbox row in the transition's transaction.
func (w *world) installHooks(kinds []kind) {
	on := slices.ContainsFunc(kinds, func(k kind) bool { return k.op == "hook" })
	w.hooks = on
	for _, t := range w.tenants {
		hs, ok := t.store.(interface{ SetHook(cancel.Hook) })
		if !ok {
			if on && w.err == nil {
				w.err = fmt.Errorf("the order store %T has no SetHook", t.store)
			}
			continue
		}
		if !on {
			hs.SetHook(nil)
			continue
		}
		hs.SetHook(func(_ context.Context, _ cancel.Querier, r cancel.Result) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.hookDown {
				return errHookDown
			}
			k := key(t, r.Order.No)
			w.facts.hooked[k] = append(w.facts.hooked[k], r.Order.Status)
			return nil
		})
	}
}

// hookKind starts (down) or ends the outage of the hook's outbox: while it
// lasts, every transition's hook fails and the transition rolls back.
func hookKind(down bool) kind {
	name := "hook: the outbox comes back"
	if down {
		name = "hook: the outbox goes down (every transition's hook fails)"
	}
	return kind{
		name:     name,
		op:       "hook",
		tenant:   1,
		touches:  footprint{hookRes: wr},
		enabled:  func(s *observation) bool { return s.hookDown != down },
		hookDown: &down,
	}
}

// facts are what the gates saw happen, the ledgers' record of events
// (outcomes as the stores answered them, never re-derived).
// Payments are keyed by tenant and id (payment.key).
type facts struct {
	refunds map[string]int // payment → refund hook calls made
	refStep map[string]int // payment → the step it was first refunded
	// calls is, per payment, every call of the refund hook with the grant
	// its operation held (the I9 ledger judges a repeat by them); events
	// numbers the grants and calls in the order they happened.
	calls  map[string][]hookCall
	events int
	reason map[string]cancel.Reason
	sent   map[string]bool
	disc   map[string]*discFact
	issued map[string]bool // payment ids whose callback was made
	acked  map[string]bool // …and answered: nil or ErrDiscrepancy
	// hooked is, per order key, the new status of every transition whose
	// store hook (cancel.Hook, installed by installHooks) succeeded: the
	// host's outbox as the hook wrote it.
	hooked map[string][]expiry.Status
	// The host's acts: the orders it deleted and those whose row it holds
	// (by order key), and whether the database's clock stepped back.
	deleted, held map[string]bool
	back          bool
	// whole is, per tenant, the last step that ran a reconcile round from
	// its start to its end (the I12 ledger judges such a round).
	whole map[int]int
	// roundFailed is, per order key, when a reconcile round's cancel of it
	// last failed (cleared by one that did not): the reconcilers back such
	// an order off, which no store shows, so the state hash keeps it.
	roundFailed map[string]time.Time
	// prov is the payment provider's side (provider_test.go): empty
	// unless the scenario wires one.
	prov     provFacts
	findings []finding
}

type discFact struct {
	settled bool
	tried   time.Time // by the database's clock, as the store's lease
}

// finding is one ledger violation: class groups findings for the report
// (the shortest sequence of each class is printed).
type finding struct {
	ledger string
	text   string
	class  string
	step   int
}

// newWorld builds a fresh world on backend b whose operations run on p. Each tenant's
// order store serves its tenant's scope, as a sqlstore.Store with a
// Mapping's Where does (gatedStore.Scope). With shared, both tenants'
// services and reconcilers use one seat store, as a host running two
// tenants on one Redis namespace would; without, each tenant's seat store
// is that seat store's scope of the tenant. A tenant no kind of kinds acts
// on (nil kinds: every tenant acts) is idle: its stores are there, empty
// for ever, but it has no services, and the observer does not read it
// (its empty show and store add nothing to a state).
func newWorld(p *pool, shared bool, b backend, kinds []kind) (*world, error) {
	start := epoch
	if b.name != memory.name {
		// The stores' clocks are real: the fake one starts at theirs.
		start = time.Now().UTC().Truncate(time.Millisecond)
	}
	clk := &fakeClock{now: start}
	w := &world{pool: p, clk: clk, backend: b, events: make(chan event), parked: map[int]*op{}, letGo: map[string]func(){}}
	w.facts = newFacts()
	rt := expiry.Runtime{Logger: slog.New(slog.DiscardHandler), Clock: clk}
	ctx := context.Background()
	stores, inserts, hosts, err := b.orders.open(clk, 2)
	if err != nil {
		return nil, err
	}
	seats, err := b.seats.open(clk)
	if err != nil {
		return nil, err
	}
	w.seatNow = seats.now
	for n, spec := range []struct {
		show      string
		seats     []string
		instances int
	}{{show1, []string{"a1", "a2"}, 2}, {show2, []string{"a1"}, 1}} {
		t := &tenant{n: n + 1, show: spec.show, seats: spec.seats, store: stores[n], insert: inserts[n], host: hosts[n], shared: seats.root}
		if !shared {
			t.shared = seats.scoped(t.scope())
		}
		t.gstore = &gatedStore{orderStore: t.store, w: w, t: t}
		t.gseats = &gatedSeats{seatStore: t.shared, w: w, t: t}
		for _, no := range orderNos[n] {
			t.orderKeys = append(t.orderKeys, key(t, no))
		}
		for _, u := range users {
			t.heldKeys = append(t.heldKeys, t.show+"/"+u)
		}
		t.idle = kinds != nil && !slices.ContainsFunc(kinds, func(k kind) bool { return k.tenant == t.n })
		w.tenants = append(w.tenants, t)
		if t.idle {
			continue
		}
		for i := 0; i < spec.instances; i++ {
			sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: gatedSender{w, t}, Runtime: rt})
			if err != nil {
				return nil, err
			}
			cfg := withShortenSink(cancel.Config{Store: t.gstore, Seats: t.gseats, Runtime: rt,
				OnDiscrepancy: w.refund(t), AcceptLatePayments: true}, sched, gatedSender{w, t})
			w.wireProvider(t, kinds, &cfg)
			svc, err := cancel.New(cfg)
			if err != nil {
				return nil, fmt.Errorf("tenant %d instance %d: cancel.New: %w", t.n, i+1, err)
			}
			// One worker: the round's calls come one at a time, so a
			// replay is deterministic.
			rec, err := reconcile.New(reconcile.Config{Orders: t.gstore, Seats: t.gseats, Service: svc, Workers: 1, Runtime: rt})
			if err != nil {
				return nil, fmt.Errorf("tenant %d instance %d: reconcile.New: %w", t.n, i+1, err)
			}
			t.svc, t.rec, t.sched = append(t.svc, svc), append(t.rec, rec), append(t.sched, sched)
		}
	}
	// A running system's seat store has been rebuilt before (its marker is
	// set): rounds do not start with a rebuild.
	for _, s := range w.seatStores() {
		token, lost, err := s.Lost(ctx)
		if err != nil {
			return nil, err
		}
		if lost {
			if err := s.MarkRestored(ctx, token); err != nil {
				return nil, err
			}
		}
	}
	if b.name != memory.name {
		w.realStart = time.Now()
		w.realMark = w.realStart
	} else {
		for _, t := range w.tenants {
			if s, ok := t.store.(interface{ Snapshot() (restore func()) }); ok {
				w.empty = append(w.empty, s.Snapshot())
			}
		}
	}
	return w, nil
}

// reset makes w, whose operations have all ended, a fresh world again
// without building one (a fifth of the exploration's allocations went to
// building worlds): the order stores go back to their snapshot of when
// they were empty, the seat store is wiped and marked rebuilt, the
// reconcilers (which keep cursors and backoffs) are built anew, and the
// world's clock, facts and operations start over. The services and
// schedulers keep nothing between calls, and stay. Only memstore's stores
// can be reset; reset reports whether w could.
func (w *world) reset() bool {
	if w.backend.name != memory.name || w.err != nil || len(w.parked) > 0 || len(w.empty) != len(w.tenants) {
		return false
	}
	root, ok := w.tenants[0].shared.(interface{ Wipe() })
	if !ok {
		return false
	}
	for _, letGo := range w.letGo {
		letGo()
	}
	for _, restore := range w.empty {
		restore()
	}
	root.Wipe()
	ctx := context.Background()
	for _, s := range w.seatStores() {
		token, lost, err := s.Lost(ctx)
		if err == nil && lost {
			err = s.MarkRestored(ctx, token)
		}
		if err != nil {
			return false
		}
	}
	rt := expiry.Runtime{Logger: slog.New(slog.DiscardHandler), Clock: w.clk}
	for _, t := range w.tenants {
		for i := range t.rec {
			rec, err := reconcile.New(reconcile.Config{Orders: t.gstore, Seats: t.gseats, Service: t.svc[i], Workers: 1, Runtime: rt})
			if err != nil {
				return false
			}
			t.rec[i] = rec
		}
	}
	w.clk.mu.Lock()
	w.clk.now, w.clk.back = epoch, 0
	w.clk.mu.Unlock()
	w.facts = newFacts()
	w.ops, w.parked, w.running, w.step, w.fp = nil, map[int]*op{}, nil, 0, 0
	w.hookDown, w.letGo, w.lockNames, w.fast = false, map[string]func(){}, nil, false
	return true
}

func newFacts() facts {
	return facts{refunds: map[string]int{}, refStep: map[string]int{},
		reason: map[string]cancel.Reason{}, sent: map[string]bool{}, disc: map[string]*discFact{}, issued: map[string]bool{}, acked: map[string]bool{},
		hooked: map[string][]expiry.Status{}, deleted: map[string]bool{}, held: map[string]bool{}, whole: map[int]int{}, roundFailed: map[string]time.Time{},
		calls: map[string][]hookCall{}, prov: newProvFacts()}
}

func (w *world) seatStores() []seatStore {
	var out []seatStore
	for _, t := range w.tenants {
		if !t.idle && !slices.Contains(out, t.shared) {
			out = append(out, t.shared)
		}
	}
	return out
}

func key(t *tenant, no string) string { return "t" + strconv.Itoa(t.n) + "/" + no }

// scope is the tenant's scope: its order store's rows (a Mapping's Where
// in sqlstore), and its keys in the seat store when they are scoped.
func (t *tenant) scope() string { return fmt.Sprintf("tenant-%d", t.n) }

// fingerprint folds one call into the running FNV-1a fingerprint, its
// lock ids named in the order the world met them (a reused world's seat
// store numbers its locks on from the worlds before it: world.reset).
func (w *world) fingerprint(text string) {
	if strings.Contains(text, "⟨") {
		if w.lockNames == nil {
			w.lockNames = map[string]int{}
		}
		text = string(renameLockIDs([]byte(text), w.lockNames))
	}
	h := w.fp ^ 0xcbf29ce484222325
	for i := 0; i < len(text); i++ {
		h ^= uint64(text[i])
		h *= 0x100000001b3
	}
	w.fp = h*0x100000001b3 + 1
}

// bucket renders an age or remaining time relative to the threshold that
// matters for it: exact below, "old" at or above, so that states differing
// only in how far past a threshold they are hash alike.
func (w *world) bucket(d, threshold time.Duration) string {
	if d >= threshold {
		return "old"
	}
	return d.String()
}

func (w *world) tenantOf(show string) string {
	for _, t := range w.tenants {
		if t.show == show {
			return fmt.Sprint(t.n)
		}
	}
	return "?"
}

// otherShows returns every other tenant's show as the seat store has it.
func (w *world) otherShows(t *tenant) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, o := range w.tenants {
		if o != t && !o.idle {
			out[o.show] = seatMap(o.shared, o.show)
		}
	}
	return out
}

func seatMap(s seatStore, show string) map[string]string {
	st, err := s.Show(context.Background(), show)
	if err != nil {
		panic(fmt.Sprintf("explore: the observer's Show(%s) failed: %v", show, err))
	}
	out := make(map[string]string, len(st))
	for seat, v := range st {
		out[seat] = seatState(v)
	}
	return out
}

func seatState(v cancel.SeatState) string {
	if v.Status == cancel.SeatSold {
		return "sold to " + v.OrderNo
	}
	return "locked by " + v.OrderNo
}

func seatsText(m map[string]string) string {
	if len(m) == 0 {
		return "all free"
	}
	var parts []string
	for _, seat := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, seat+" "+m[seat])
	}
	return strings.Join(parts, ", ")
}

// The facts' writers, called by the gates inside the calls they record.

func (w *world) cancelled(t *tenant, no string, r cancel.Reason) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.facts.reason[key(t, no)] = r
	w.provCancelled(t, no, r)
}

// refunded records a call of tenant t's refund hook for payment id, made
// by the operation o (nil: outside any), with the grant o held for it.
func (w *world) refunded(o *op, t *tenant, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.provRefunded(t, id)
	id = payKey(t.n, id)
	w.facts.refunds[id]++
	if _, ok := w.facts.refStep[id]; !ok {
		w.facts.refStep[id] = w.step
	}
	w.facts.events++
	c := hookCall{step: w.step, at: w.clk.orderNow(), n: w.facts.events}
	if o != nil {
		c.op = o.name
		c.held, c.has = o.grants[id]
	}
	w.facts.calls[id] = append(w.facts.calls[id], c)
}

// granted records that the discrepancy store gave operation o (nil:
// outside any) tenant t's payment id to refund: its RecordDiscrepancy
// answered true, or its ClaimDiscrepancies listed the payment. It is the
// store's "tried now", on the database's clock.
func (w *world) granted(o *op, t *tenant, id string) {
	if o == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.facts.events++
	if o.grants == nil {
		o.grants = map[string]grant{}
	}
	o.grants[payKey(t.n, id)] = grant{at: w.clk.orderNow(), step: w.step, n: w.facts.events}
}

func (w *world) tried(t *tenant, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	id = payKey(t.n, id)
	d := w.facts.disc[id]
	if d == nil {
		d = &discFact{}
		w.facts.disc[id] = d
	}
	d.tried = w.clk.orderNow() // the store's "tried now": the database's clock
}

func (w *world) settled(t *tenant, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := w.facts.disc[payKey(t.n, id)]; d != nil {
		d.settled = true
	}
}

func (w *world) sent(t *tenant, no string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.facts.sent[key(t, no)] = true
}

func (w *world) finding(ledger, text, class string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.facts.findings = append(w.facts.findings, finding{ledger: ledger, text: text, class: ledger + " " + class, step: w.step})
}

// kind is one entry of the catalog of steps.
type kind struct {
	name string
	// op names the operation for the findings' classes ("by pay"), so
	// that each operation that can break a ledger shows its own shortest
	// sequence.
	op     string
	tenant int // 1 or 2; 0 for the clock
	// enabled says, from the observed state, whether starting it can do
	// anything at all (a step that surely changes nothing is not worth a
	// replay; the state hash would discard it anyway).
	enabled func(s *observation) bool
	// run is the operation, in its own goroutine; nil for clock steps.
	run func(ctx context.Context, w *world) string
	// clock moves the clock (clock steps only).
	clock func(s *observation) time.Duration
	// payment is the payment id of a payment step (the provider repeats
	// it at settle until it is answered).
	payment string
	// faults says whether a gated seat-store write of this step may be
	// told to fail while the step goes on (reconcile rounds: a failure
	// there is not the same as stopping the round).
	faults bool
	// round names the tenant of a reconcile round ("" for other kinds).
	round string
	// twin, when >= 0, is the kind that must be in flight for this one to
	// start (see withTwins).
	twin int
	// hookDown, for a hook step, is the outage it sets when it starts.
	hookDown *bool
	// host, for a host step, is the host's act on its rows, between two
	// steps of the library's operations (it returns what it did).
	host func(w *world) string
	// back, for the database's clock stepping back, is how far.
	back time.Duration
	// noReplay, when set, says why the SQL replays leave out every
	// sequence with this step.
	noReplay string
	// touches is what a step of this kind reads or writes besides its
	// store calls (footprint): the order its enabled and run read, the
	// facts it writes.
	touches footprint
}

// placeKind places no for user on seats of tenant t's show through
// instance inst: the library locks, the host's transaction inserts (a gated
// call), and after commit the scheduler sends the expiry message (gated).
func placeKind(tn, inst int, no, user string, seats ...string) kind {
	return kind{
		name:    fmt.Sprintf("place %s by %s on %s (tenant %d, instance %d)", no, user, strings.Join(seats, "+"), tn, inst+1),
		op:      "place",
		tenant:  tn,
		touches: footprint{orderRes(tn, no): rd},
		// The host never reuses the number of an order it deleted.
		enabled: func(s *observation) bool {
			return !s.order(tn, no).exists && !s.facts.deleted[fmt.Sprintf("t%d/%s", tn, no)]
		},
		run: func(ctx context.Context, w *world) string {
			t := w.tenants[tn-1]
			start := w.clk.Now()
			// The deadline is the store's now plus the window (the fake
			// clock's on memstore).
			now, err := t.store.Now(context.Background())
			if err != nil {
				return errSummary(err)
			}
			p := withLimit(cancel.Placement{OrderNo: no, UserID: user, ShowID: t.show, Seats: seats, ExpireAt: now.Add(ttl)}, limit)
			err = place(ctx, t.svc[inst], p, limit, func(ictx context.Context, p cancel.Placement) error {
				err := w.do(ictx, "Insert", no, true, func() (string, error) {
					// The host's transaction is bounded by PlaceTimeout (by
					// the real clock in production; by the fake one here,
					// where a stopped placement lives in fake time).
					if w.clk.Now().Sub(start) >= cancel.PlaceTimeoutDefault {
						return "", context.DeadlineExceeded
					}
					if err := t.insert(ictx, p); err != nil {
						return "", err
					}
					w.provPlaced(t, no)
					return "inserted", nil
				})
				if err != nil {
					return err
				}
				if !placeSchedules {
					t.sched[inst].Schedule(ictx, no, p.ExpireAt) // after commit
				}
				return nil
			})
			return outcome(err)
		},
	}
}

func cancelKind(tn, inst int, name, no string, call func(ctx context.Context, svc *cancel.Service, owner string) error, enabled func(o orderView) bool) kind {
	return kind{
		name:    fmt.Sprintf("%s %s (tenant %d, instance %d)", name, no, tn, inst+1),
		op:      name,
		tenant:  tn,
		touches: footprint{orderRes(tn, no): rd},
		enabled: func(s *observation) bool { return enabled(s.order(tn, no)) },
		run: func(ctx context.Context, w *world) string {
			t := w.tenants[tn-1]
			owner := ""
			if o, err := t.store.Order(context.Background(), no); err == nil { // the host knows its buyer
				owner = o.UserID
			}
			return outcome(call(ctx, t.svc[inst], owner))
		},
	}
}

func payKind(inst, i int) kind {
	pm := payments[i]
	no, id, tn := pm.order, pm.id, pm.tenant
	return kind{
		name:    fmt.Sprintf("pay %s with %s (tenant %d, instance %d)", no, id, tn, inst+1),
		op:      "pay",
		tenant:  tn,
		payment: pm.key(),
		// the order's status, and the provider's callback (issued, acked)
		touches: footprint{orderRes(tn, no): rd, payRes(tn, id): wr},
		enabled: func(s *observation) bool {
			// Paying an order paid (by this very payment: see payments)
			// again changes nothing: a repeated callback answered before.
			// An order the host deleted still gets its payment (made
			// before the delete, or repeated after it).
			o := s.order(tn, no)
			return o.exists && o.Status != expiry.StatusPaid || s.facts.deleted[pm.orderKey()]
		},
		run: func(ctx context.Context, w *world) string {
			w.issue(pm.key())
			_, err := w.tenants[tn-1].svc[inst].Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: id})
			if o, _ := ctx.Value(opKey{}).(*op); o != nil && !o.dead && (err == nil || errors.Is(err, cancel.ErrDiscrepancy)) {
				w.ack(pm.key()) // the provider got its answer and stops repeating
			}
			return outcome(err)
		},
	}
}

func roundKind(tn, inst int) kind {
	return kind{
		name:    fmt.Sprintf("reconcile round (tenant %d, instance %d)", tn, inst+1),
		op:      "reconcile round",
		tenant:  tn,
		faults:  true,
		round:   fmt.Sprint(tn),
		enabled: func(*observation) bool { return true },
		touches: footprint{fmt.Sprintf("whole %d", tn): wr}, // facts.whole
		run: func(ctx context.Context, w *world) string {
			rep, err := w.tenants[tn-1].rec[inst].Round(ctx)
			if o, _ := ctx.Value(opKey{}).(*op); o != nil {
				o.active = rep.Expired+rep.LostRaces+rep.Released+rep.Sold+rep.Restored+rep.Refunds > 0
				if !o.auto && !o.dead && o.step == w.step {
					w.mu.Lock()
					w.facts.whole[tn] = w.step
					w.mu.Unlock()
				}
			}
			return fmt.Sprintf("expired %d released %d sold %d restored %d refunds %d%s", rep.Expired, rep.Released, rep.Sold, rep.Restored, rep.Refunds, errSuffix(err))
		},
	}
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ", error " + errSummary(err)
}

func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return errSummary(err)
}

func (w *world) issue(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.facts.issued[id] = true
}

func (w *world) ack(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.facts.acked[id] = true
}

func pending(o orderView) bool { return o.exists && o.Status == expiry.StatusPending }

// scenario is one exploration: a catalog of steps over the world.
type scenario struct {
	name  string
	kinds func() []kind
	// hostTables says the SQL replays run it on a host's tables that both
	// tenants share in one database, each scoped by its Mapping's Where
	// (newSQLHostOrders), instead of the library's schema in a database
	// per tenant: where a soft delete exists and payment ids of two
	// tenants meet.
	hostTables bool
}

// scenarios are explored one after the other, on the same world; each
// catalog is what its question needs, so that the state space stays small
// enough to enumerate (it grows with the product of the kinds of step):
// payments racing cancels, timeouts and reconcile rounds on two instances;
// the deadline controls (expire-now, extend, shorten) among them; the
// scope of two tenants on one seat store; the store's transition hook;
// the host as an actor (its deletes, its tenants' payment ids, its
// database's clock stepping back, its row locks); and payments in flight
// (a payment provider the Services ask before a timeout cancels, and its
// buyer: provider_test.go).
var scenarios = []scenario{
	{"payments", paymentRaces, false},
	{"deadlines", deadlines, false},
	{"two tenants", twoTenants, false},
	{"hooks", hooks, false},
	{"host deletes", hostDeletes, true},
	{"payment ids", paymentIDs, true},
	{"clock back", clockBack, false},
	{"host holds", hostHolds, false},
	{"payments in flight", paymentsInFlight, false},
}

// Service calls are spread over the two instances (a Service keeps no
// state, so which one runs a call does not matter); reconcile rounds run on
// both, since a Reconciler keeps cursors.
// timeoutKind is the expiry message's delivery: the clock moves to the
// order's deadline (if it is not there yet) and the message is handled by
// Service.Timeout. Only an order whose message was sent gets one (a crash
// before the send leaves the order to the reconciler). A message that
// arrives before the deadline only re-arms, which changes nothing.
func timeoutKind(tn, inst int, no string) kind {
	return kind{
		name:   fmt.Sprintf("timeout %s: clock to its deadline, message handled (tenant %d, instance %d)", no, tn, inst+1),
		op:     "timeout",
		tenant: tn,
		// The order's deadline (read outside the gate), and the Service's
		// Timeout lanes (cancel/timeouts.go), which it keeps between calls.
		touches: footprint{orderRes(tn, no): rd, fmt.Sprintf("timeout lanes %d/%d", tn, inst): wr},
		enabled: func(s *observation) bool {
			return pending(s.order(tn, no)) && s.facts.sent[fmt.Sprintf("t%d/%s", tn, no)]
		},
		run: func(ctx context.Context, w *world) string {
			t := w.tenants[tn-1]
			if o, err := t.store.Order(context.Background(), no); err == nil && o.ExpireAt.After(o.ReadAt) {
				w.advance(o.ExpireAt.Sub(o.ReadAt))
			}
			_, _, err := t.svc[inst].Timeout(ctx, no)
			return outcome(err)
		},
	}
}

func userCancelKind(inst int, no string) kind {
	return cancelKind(1, inst, "user cancel", no, func(ctx context.Context, svc *cancel.Service, owner string) error {
		_, err := svc.UserCancel(ctx, no, owner)
		return err
	}, pending)
}

var clockKinds = []kind{
	{
		name:    "clock: to the next deadline",
		op:      "clock",
		touches: footprint{clockRes: wr},
		clock:   func(s *observation) time.Duration { return s.nextDeadline() },
		enabled: func(s *observation) bool { return s.nextDeadline() > 0 },
	},
	{
		name:    "clock: past Grace, Settle and the refund lease",
		op:      "clock",
		touches: footprint{clockRes: wr},
		clock:   func(*observation) time.Duration { return settleAdvance },
		enabled: func(s *observation) bool { return s.young },
	},
}

// paymentRaces is tenant 1's races: placements (two of o2, by different users
// on different seats, so that a double submit races, and so that one user
// may try for a second seat), timeouts, user cancels, payments, reconcile
// rounds on both instances, and the clock.
func paymentRaces() []kind {
	return withTwins([]kind{
		placeKind(1, 0, "o1", "u1", "a1"),
		placeKind(1, 1, "o2", "u2", "a1"),
		placeKind(1, 0, "o2", "u1", "a2"),
		timeoutKind(1, 0, "o1"),
		timeoutKind(1, 1, "o2"),
		userCancelKind(1, "o1"),
		userCancelKind(0, "o2"),
		payKind(1, 0),
		payKind(0, 1),
		roundKind(1, 0),
		roundKind(1, 1),
		clockKinds[0],
		clockKinds[1],
	})
}

// deadlines is tenant 1 with the deadline controls: expire-now (final for
// a late payment), extend and shorten, among placements, timeouts,
// payments, one instance's reconcile rounds and the clock.
func deadlines() []kind {
	notDue := func(o orderView) bool { return pending(o) && o.remaining > 0 }
	return withTwins([]kind{
		placeKind(1, 0, "o1", "u1", "a1"),
		placeKind(1, 1, "o2", "u2", "a1"),
		timeoutKind(1, 0, "o1"),
		timeoutKind(1, 1, "o2"),
		cancelKind(1, 1, "expire now", "o2", func(ctx context.Context, svc *cancel.Service, _ string) error {
			_, err := svc.ExpireNow(ctx, "o2")
			return err
		}, pending),
		cancelKind(1, 0, "extend by 20m", "o1", func(ctx context.Context, svc *cancel.Service, _ string) error {
			_, err := svc.Extend(ctx, "o1", "", 20*time.Minute)
			return err
		}, notDue),
		cancelKind(1, 1, "shorten to now", "o1", func(ctx context.Context, svc *cancel.Service, _ string) error {
			_, err := svc.Shorten(ctx, "o1", "", 0)
			return err
		}, notDue),
		payKind(1, 0),
		payKind(0, 1),
		roundKind(1, 0),
		clockKinds[0],
		clockKinds[1],
	})
}

// twoTenants is the scope question: tenant 1 with one order, its timeout,
// its payment and its reconciler; tenant 2 with one order numbered like
// tenant 1's on its own show, and its reconciler; the clock.
func twoTenants() []kind {
	return withTwins([]kind{
		placeKind(1, 0, "o1", "u1", "a1"),
		timeoutKind(1, 0, "o1"),
		payKind(1, 0),
		roundKind(1, 0),
		placeKind(2, 0, "o1", "u1", "a1"),
		roundKind(2, 0),
		clockKinds[0],
		clockKinds[1],
	})
}

// hooks is tenant 1 with the store's transition hook (cancel.Hook) and
// its outbox going down and coming back: a cancel or a payment whose hook
// fails rolls back and is tried again later (the timeout's redelivery, the
// reconciler after its backoff, the provider's repeat). One order, with its
// timeout, its user's cancel, its payment, reconcile rounds and the clock:
// each way out of pending meets the outage, and the state space stays
// small enough for the replays on the real stores (internal/testenv/test.sh
// runs them all).
func hooks() []kind {
	return withTwins([]kind{
		placeKind(1, 0, "o1", "u1", "a1"),
		hookKind(true),
		hookKind(false),
		timeoutKind(1, 0, "o1"),
		userCancelKind(1, "o1"),
		payKind(1, 0),
		roundKind(1, 0),
		clockKinds[0],
		clockKinds[1],
	})
}

// The host as an actor (issue 36): between the library's operations the
// host acts on its own rows and clocks. Each question is a scenario of its
// own, with the few steps it needs (a catalog with all of them would
// multiply the state space past what depth 7 enumerates in seconds), and
// each host step is enabled only where it can matter.

// hostDeletes: the host deletes o1 once it is cancelled (a buyer's "delete
// my order"), hard or soft; the payment made before the close arrives, or
// is repeated, afterwards, and must end refunded once (I14, I9). With o1's
// timeout (whose late payment reinstates), its payment, a reconcile round
// and the clock.
func hostDeletes() []kind {
	return withTwins([]kind{
		placeKind(1, 0, "o1", "u1", "a1"),
		timeoutKind(1, 0, "o1"),
		payKind(1, 0),
		roundKind(1, 0),
		deleteKind(1, "o1", false),
		deleteKind(1, "o1", true),
		clockKinds[0],
		clockKinds[1],
	})
}

// paymentIDs: each tenant has its own provider account, so tenant 2's
// pay-1 (for its own o1) is another payment than tenant 1's pay-1: each
// must end honoured or refunded once in its own scope. Tenant 1's pay-1
// pays its o1 (a decision recorded under the id); tenant 2's order is closed by its user's cancel, or paid by its pay-1.
// Each tenant runs its reconciler. On memstore each tenant's store keeps
// its own records; the SQL replay shares one database's tables between
// them (newSQLHostOrders), where the payment ids meet.
func paymentIDs() []kind {
	return withTwins([]kind{
		placeKind(1, 0, "o1", "u1", "a1"),
		payKind(0, 0),
		roundKind(1, 0),
		placeKind(2, 0, "o1", "u1", "a1"),
		cancelKind(2, 0, "user cancel", "o1", func(ctx context.Context, svc *cancel.Service, owner string) error {
			_, err := svc.UserCancel(ctx, "o1", owner)
			return err
		}, pending),
		payKind(0, 2),
		roundKind(2, 0),
		clockKinds[1],
	})
}

// clockBack: the database's clock steps back an hour while the seat
// store's does not, once an order is decided (right after its decision,
// whose release may have been lost): the lock pass must still free a
// cancelled order's seats at settle (I15), and a refund still be made
// (I14). One order, its timeout, its payment, a round and the clock.
func clockBack() []kind {
	return withTwins([]kind{
		placeKind(1, 0, "o1", "u1", "a1"),
		timeoutKind(1, 0, "o1"),
		payKind(1, 0),
		roundKind(1, 0),
		clockKinds[0],
		clockKinds[1],
		clockBackKind,
	})
}

// hostHolds: the host holds o1's row (SELECT … FOR UPDATE while it calls
// its payment provider) and lets go; a round meanwhile must still expire
// o2 (I12), and o1 once it is let go; a payment of o1 meanwhile fails and
// is repeated by the provider. Two orders (o2 placed once o1 is: see
// afterOrder), o1's payment, a round and the clock.
func hostHolds() []kind {
	return withTwins([]kind{
		placeKind(1, 0, "o1", "u1", "a1"),
		afterOrder(placeKind(1, 1, "o2", "u2", "a2"), 1, "o1"),
		holdKind(1, "o1", true),
		holdKind(1, "o1", false),
		payKind(1, 0),
		roundKind(1, 0),
		clockKinds[0],
		clockKinds[1],
	})
}

// afterOrder enables k only once tenant tn's order no exists. Two orders
// placed at one instant of the fake clock are due at the same instant on
// memstore (the reconciler lists them by number) but a few milliseconds
// apart on the real stores (listed by deadline): placed in number order,
// both list them alike.
func afterOrder(k kind, tn int, no string) kind {
	enabled := k.enabled
	k.enabled = func(s *observation) bool { return s.order(tn, no).exists && enabled(s) }
	k.touches = maps.Clone(k.touches)
	k.touches.add(rd, orderRes(tn, no))
	return k
}

// deleteKind is the host deleting tenant tn's order no once it is
// cancelled (a buyer's "delete my order"): soft (the row stays, outside
// the store's Where) or hard. memstore cannot tell the two apart (the row
// leaves its view either way); the SQL replays can.
func deleteKind(tn int, no string, soft bool) kind {
	how := "hard"
	if soft {
		how = "soft"
	}
	k := fmt.Sprintf("t%d/%s", tn, no)
	return kind{
		name:    fmt.Sprintf("host deletes %s (%s, tenant %d)", no, how, tn),
		op:      "host delete",
		tenant:  tn,
		touches: footprint{orderRes(tn, no): wr},
		enabled: func(s *observation) bool {
			o := s.order(tn, no)
			return o.exists && o.Status == expiry.StatusCancelled
		},
		host: func(w *world) string {
			if err := w.tenants[tn-1].host.delete(context.Background(), no, soft); err != nil {
				w.fail(fmt.Errorf("the host's %s delete of %s: %w", how, k, err))
				return errSummary(err)
			}
			w.mu.Lock()
			w.facts.deleted[k] = true
			w.mu.Unlock()
			return "deleted"
		},
	}
}

// holdKind is the host taking (hold) or letting go of the row of tenant
// tn's pending order no in a transaction of its own (SELECT … FOR UPDATE
// while it calls its payment provider).
func holdKind(tn int, no string, hold bool) kind {
	k := fmt.Sprintf("t%d/%s", tn, no)
	name := fmt.Sprintf("host lets go of %s's row (tenant %d)", no, tn)
	if hold {
		name = fmt.Sprintf("host holds %s's row (SELECT … FOR UPDATE while it calls its provider, tenant %d)", no, tn)
	}
	return kind{
		name:     name,
		op:       "host hold",
		tenant:   tn,
		touches:  footprint{orderRes(tn, no): wr},
		noReplay: "SQLite has no row lock (a writer holds the whole database), and a server's lock wait answers in real time, not at a gate",
		enabled: func(s *observation) bool {
			if !hold {
				return s.facts.held[k]
			}
			return !s.facts.held[k] && pending(s.order(tn, no))
		},
		host: func(w *world) string {
			w.mu.Lock()
			defer w.mu.Unlock()
			if !hold {
				w.letGo[k]()
				delete(w.letGo, k)
				delete(w.facts.held, k)
				return "let go"
			}
			letGo, err := w.tenants[tn-1].host.hold(context.Background(), no)
			if err != nil {
				if w.err == nil {
					w.err = fmt.Errorf("the host's hold of %s: %w", k, err)
				}
				return errSummary(err)
			}
			w.letGo[k], w.facts.held[k] = letGo, true
			return "held"
		},
	}
}

// clockBackKind steps the database's clock back an hour, once, while the
// seat store's and the hosts' clocks go on (a failover to a node whose
// clock was behind): right after a decision, whose release may have been
// lost.
//
// Not while a refund is recorded and not settled. The refund lease is
// measured on the database's clock by design (expiry/doc.go, "The host is
// an actor"): a refund whose hook call died before the step is retried
// once the clock has caught up, an hour late, so that no hook call is
// duplicated within its lease; the settle here passes the lease, not the
// hour, and would report that lateness as a refund never made:
// place o1; timeout o1 stopped before its Release; pay o1 stopped before
// its Refund; the clock steps back; settle with both killed: no refund.
var clockBackKind = kind{
	name:    "clock: the database's clock steps back an hour (the seat store's does not)",
	op:      "clock back",
	back:    time.Hour,
	touches: footprint{clockRes: wr},
	enabled: func(s *observation) bool {
		for _, d := range s.facts.disc {
			if !d.settled {
				return false
			}
		}
		return !s.facts.back && slices.ContainsFunc(slices.Collect(maps.Values(s.orders)), func(o orderView) bool {
			return o.exists && o.Status != expiry.StatusPending
		})
	},
}

// stepBack steps the order stores' clock back by d: memstore's run on
// clk.orderNow; on real stores every stored time moves forward instead
// (orderSide.shift by -d), which every comparison with the database's now
// answers as it would after the step. The seat store does not move.
func (w *world) stepBack(d time.Duration) {
	w.clk.mu.Lock()
	w.clk.back += d
	w.clk.mu.Unlock()
	w.mu.Lock()
	w.facts.back = true
	w.mu.Unlock()
	if err := w.backend.orders.shift(context.Background(), -d); err != nil && w.err == nil {
		w.err = fmt.Errorf("stepping the order stores' clock back by %v: %w", d, err)
	}
}

// roundTried records a reconcile round's cancel of nos that failed (err)
// or did not (facts.roundFailed).
func (w *world) roundTried(ctx context.Context, t *tenant, err error, nos ...string) {
	if o, _ := ctx.Value(opKey{}).(*op); o == nil || !o.round {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, no := range nos {
		if err != nil {
			w.facts.roundFailed[key(t, no)] = w.clk.Now()
		} else {
			delete(w.facts.roundFailed, key(t, no))
		}
	}
}

// fail records the first failure of the world itself.
func (w *world) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// withTwins links each reconcile round of a second instance to the first
// instance's: two Reconcilers between rounds are alike (their cursors are
// back at the start), so a round of the second instance starts only while
// one of the first is in flight: the other order of the two is the same
// state by symmetry.
func withTwins(kinds []kind) []kind {
	for i := range kinds {
		kinds[i].twin = -1
		for j := range kinds[:i] {
			if kinds[i].round != "" && kinds[j].round == kinds[i].round {
				kinds[i].twin = j
				break
			}
		}
	}
	return kinds
}

// maxDrift bounds how long a world on real stores may take to its last
// clock step: less than the shortest time between two instants the fake
// clock can tell apart (every clock step and every threshold the library
// compares an age or a deadline with is a whole number of seconds: ttl,
// settleAdvance, Extend's 20 minutes, MaxHoldDefault, GraceDefault,
// SettleDefault, DiscrepancyLeaseDefault, PlaceTimeoutDefault).
const maxDrift = 900 * time.Millisecond

// errTooSlow is a world on real stores that took longer than maxDrift: its
// replay says nothing and is run again.
var errTooSlow = errors.New("explore: the replay took longer than maxDrift to its last clock step")

// advance moves the world's clock by d: the fake clock, and the stores'
// clocks where they keep their own (orderSide.shift, seatSide.shift).
//
// On memstore every call between two clock steps happens at one instant
// of the fake clock. On real stores they happen over the real time between
// the two steps, so the stores are moved by d plus that time (rounded up to
// the millisecond): every time written since the last step is then at least
// d old, as on memstore, and no time is older than on memstore by more than
// the world's real age so far, which maxDrift keeps below the smallest gap
// between two instants the fake clock can tell apart. So each comparison
// of a stored time with a threshold answers as on memstore, ties included
// (memstore's ties are on the "reached" side: a deadline equal to now is
// due, an age equal to Grace is stale).
func (w *world) advance(d time.Duration) {
	w.clk.advance(d)
	if !w.realMark.IsZero() {
		since := time.Since(w.realMark)
		d += since.Truncate(time.Millisecond) + time.Millisecond
		w.realMark = time.Now()
		w.drift = w.realMark.Sub(w.realStart)
		if w.drift > maxDrift && w.err == nil {
			w.err = errTooSlow
		}
	}
	ctx := context.Background()
	if err := w.backend.orders.shift(ctx, d); err != nil && w.err == nil {
		w.err = fmt.Errorf("moving the order stores' clock by %v: %w", d, err)
	}
	if err := w.backend.seats.shift(ctx, d); err != nil && w.err == nil {
		w.err = fmt.Errorf("moving the seat store's clock by %v: %w", d, err)
	}
}
