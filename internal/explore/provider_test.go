package explore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Payments in flight (expiry/doc.go, I18): the host wires its payment
// provider into its Services (cancel.Config.Provider), and the buyer of an
// order pays on the provider's page while the library's timeouts and
// reconcile rounds decide the order. The provider is a model of the
// world, one session per order (none, open, paid with a payment id,
// closed), and its calls (QueryPayment, ClosePayment) go through the gate
// like the stores' calls, so that a timeout or a round can be stopped
// between its query and its close, or between its close and its cancel,
// while the buyer acts. The buyer's acts and the provider's outage are
// steps of their own; the provider's callback of a payment it took is the
// pay step, enabled once it took it and repeated at settle until answered.
//
// The ledgers judge outcomes only:
//   - at each cancel a timeout or a round commits: the order's session is
//     not open or paid at the provider, unless the database's clock is at
//     or past the order's placement plus MaxHold (provCancelled);
//   - at each call of the refund hook: the provider took that payment
//     (provRefunded; once per payment id is I9's ledger);
//   - at settle: the session of every order a timeout or a round cancelled,
//     if one was ever opened, is closed, or the order was cancelled with
//     its session left open at the cap and that was counted (the
//     Observer's "unclosed" event); every payment the provider took paid
//     its order or was refunded (judgeProvider).

// The provider's settings of the scenario's Services: the cap (placement
// plus provMaxHold) is reached by a second timeout after one re-arm
// (15 minutes to the deadline, 5 more waiting for the provider).
const (
	provMaxHold = 20 * time.Minute
	provRetry   = 5 * time.Minute
	// provTimeout bounds a provider call by the real clock: the model
	// answers at once, and a call stopped at its gate must not run out.
	provTimeout = time.Hour
)

// provPayment is the payment the buyer of tenant 1's o1 makes on the
// provider's page (payments[0]).
var provPayment = payments[0]

// sessState is an order's payment session at the provider.
type sessState uint8

const (
	sessNone   sessState = iota // never opened
	sessOpen                    // the buyer is paying
	sessPaid                    // the provider took the payment
	sessClosed                  // closed (ClosePayment): nobody can pay on it
)

func (s sessState) String() string {
	return [...]string{"none", "open", "paid", "closed"}[s]
}

type session struct {
	state sessState
	id    string // the payment id, once paid
}

// provFacts is the provider's side of the world, in the facts (reset with
// them, copied into each observation, hashed): empty in every scenario
// without a provider.
type provFacts struct {
	down bool // every call errors
	// sess is each order's session (order key); opened, the orders whose
	// buyer ever opened one; taken, the payments the provider took
	// (payment.key).
	sess          map[string]session
	opened, taken map[string]bool
	placed        map[string]time.Time // order key → its insert, by the database's clock
	unclosed      map[string]int       // order key → "unclosed" events observed
}

func newProvFacts() provFacts {
	return provFacts{sess: map[string]session{}, opened: map[string]bool{}, taken: map[string]bool{}, placed: map[string]time.Time{}, unclosed: map[string]int{}}
}

func (p provFacts) clone() provFacts {
	c := p
	c.sess, c.opened, c.taken, c.placed, c.unclosed = maps.Clone(p.sess), maps.Clone(p.opened), maps.Clone(p.taken), maps.Clone(p.placed), maps.Clone(p.unclosed)
	return c
}

// hash adds the provider's state to a state's canonical text: per order
// its session, whether one was ever opened, the "unclosed" events, and,
// while the order is pending, its age since placement against MaxHold
// (the cap the library and ledger (a) compare with); and the outage.
func (p provFacts) hash(b hashText, s *observation) hashText {
	keys := map[string]bool{}
	for k := range p.sess {
		keys[k] = true
	}
	for k := range p.placed {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		ss := p.sess[k]
		b = b.add("prov", k, ss.state.String(), ss.id).flag(p.opened[k]).add(fmt.Sprint(min(p.unclosed[k], 1)))
		if at, ok := p.placed[k]; ok && pending(s.orders[k]) {
			b = b.bucket(s.dbNow.Sub(at), provMaxHold)
		}
		b = b.end()
	}
	if p.down {
		b = b.add("provider down").end()
	}
	return b
}

// provRes is the provider's session of tenant tn's order no; provDownRes
// its outage, which every provider call reads.
func provRes(tn int, no string) string { return "provider " + fmt.Sprint(tn) + "/" + no }

const provDownRes = "provider outage"

// provModel is the host's provider adapter the Services ask.
type provModel uint8

const (
	provNone provModel = iota // no provider wired (every other scenario)
	// provBarring: a close bars the order's payment for good, as an
	// adapter that records the close under the order number and refuses
	// to open a session for it afterwards does (a trade close keyed by
	// the merchant's order number, made even before any trade exists).
	// The buyer opens at most one session per order, and only before any
	// close. The scenario's model (see provPlain for why).
	provBarring
	// provPlain: a close closes the session open at that moment, if any,
	// and bars nothing after it: the buyer may open a session (again)
	// while the order is pending, also between the close and the
	// cancel's commit. The library's cancel then commits with that
	// session open, never closed (provider_close_test.go): what
	// ClosePayment's contract rules out.
	provPlain
)

// The buyerOpens kinds' ops, which say the catalog's provider model.
const (
	opOpens      = "buyer opens"
	opOpensPlain = "buyer opens (plain adapter)"
)

// providerOf says which provider a catalog's Services get (wireProvider).
func providerOf(kinds []kind) provModel {
	for _, k := range kinds {
		switch k.op {
		case opOpens:
			return provBarring
		case opOpensPlain:
			return provPlain
		}
	}
	return provNone
}

// wireProvider gives tenant t's Service config c the world's provider, its
// settings and an Observer of its events, when the catalog has one; other
// scenarios' Services are left as they were.
func (w *world) wireProvider(t *tenant, kinds []kind, c *cancel.Config) {
	if w.provider = providerOf(kinds); w.provider == provNone {
		return
	}
	c.Provider = gatedProvider{w, t}
	c.MaxHold, c.ProviderRetry, c.ProviderTimeout = provMaxHold, provRetry, provTimeout
	c.Runtime.Observer = provObserver{w, t}
}

// errProviderDown is every provider call's answer during its outage.
var errProviderDown = errors.New("explore: the payment provider is down")

// gatedProvider is tenant t's payment provider (the host's adapter),
// behind the gate: each call is a gated call of its operation.
type gatedProvider struct {
	w *world
	t *tenant
}

func (g gatedProvider) QueryPayment(ctx context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	return g.call(ctx, "QueryPayment", o.No, false)
}

func (g gatedProvider) ClosePayment(ctx context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	return g.call(ctx, "ClosePayment", o.No, true)
}

// call answers for the session of order no, closing an open one (close).
// Closing a session never opened, or closed, answers not paid (and, with
// provBarring, bars any session after it); a paid one answers paid with
// its id (the provider refuses to close it).
func (g gatedProvider) call(ctx context.Context, name, no string, close bool) (cancel.PaymentAnswer, error) {
	var ans cancel.PaymentAnswer
	err := g.w.do(ctx, name, no, true, func() (string, error) {
		g.w.mu.Lock()
		defer g.w.mu.Unlock()
		p := &g.w.facts.prov
		if p.down {
			return "", errProviderDown
		}
		k := key(g.t, no)
		s := p.sess[k]
		switch s.state {
		case sessNone, sessClosed:
			ans = cancel.PaymentAnswer{State: cancel.PaymentNotPaid}
			if close && g.w.provider == provBarring {
				p.sess[k] = session{state: sessClosed}
			}
		case sessOpen:
			ans = cancel.PaymentAnswer{State: cancel.PaymentOpen}
			if close {
				p.sess[k] = session{state: sessClosed}
				ans = cancel.PaymentAnswer{State: cancel.PaymentNotPaid}
			}
		case sessPaid:
			ans = cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: s.id}
		}
		text := ans.State.String()
		if ans.PaymentID != "" {
			text += " " + ans.PaymentID
		}
		return text, nil
	})
	return ans, err
}

// provObserver is tenant t's Services' Observer: it records the cancels
// at the cap whose session could not be closed ("unclosed"), which ledger
// (b) requires to have been counted.
type provObserver struct {
	w *world
	t *tenant
}

func (p provObserver) Observe(_ context.Context, e expiry.Event) {
	if e.Kind != expiry.KindProviderAnswered || e.Reason != "unclosed" {
		return
	}
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	p.w.facts.prov.unclosed[key(p.t, e.OrderNo)]++
}

// provPlaced records the insert of tenant t's order no (the host's
// transaction committed), by the database's clock.
func (w *world) provPlaced(t *tenant, no string) {
	if w.provider == provNone {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.facts.prov.placed[key(t, no)] = w.clk.orderNow()
}

// provCancelled is ledger (a), at the commit of a cancel of tenant t's
// order no for reason r (w.mu held): a timeout's or a round's cancel finds
// the order's session neither open nor paid at the provider, unless the
// database's clock is at or past the order's placement plus MaxHold.
func (w *world) provCancelled(t *tenant, no string, r cancel.Reason) {
	if w.provider == provNone || r != cancel.ReasonTimeout && r != cancel.ReasonReconcile {
		return
	}
	k := key(t, no)
	s := w.facts.prov.sess[k]
	if s.state != sessOpen && s.state != sessPaid {
		return
	}
	now, placed := w.clk.orderNow(), w.facts.prov.placed[k]
	if !now.Before(placed.Add(provMaxHold)) {
		return
	}
	w.facts.findings = append(w.facts.findings, finding{ledger: "I18", step: w.step,
		class: fmt.Sprintf("I18 a %s cancelled an order whose session is %s at the provider before its maximum hold", r, s.state),
		text:  fmt.Sprintf("order %s cancelled (%s) %v after its placement (MaxHold %v) with its session %s at the provider", k, r, now.Sub(placed), provMaxHold, s.state)})
}

// provRefunded is ledger (c), at a call of tenant t's refund hook for
// payment id (w.mu held): the provider took that payment.
func (w *world) provRefunded(t *tenant, id string) {
	if w.provider == provNone || w.facts.prov.taken[payKey(t.n, id)] {
		return
	}
	w.facts.findings = append(w.facts.findings, finding{ledger: "I9", step: w.step,
		class: "I9 a refund of a payment the provider never took",
		text:  fmt.Sprintf("the refund hook was called for %s, which the provider never took", payKey(t.n, id))})
}

// provSettle is the provider's part of a settle: its outage ends, and the
// clock moves past every order's maximum hold, so that the rounds that
// follow decide every pending order (a paid session pays it; any other is
// closed and the order cancelled).
func (w *world) provSettle() []string {
	if w.provider == provNone {
		return nil
	}
	var out []string
	w.mu.Lock()
	if w.facts.prov.down {
		w.facts.prov.down = false
		out = append(out, "the provider comes back")
	}
	w.mu.Unlock()
	w.advance(provMaxHold)
	return append(out, "clock +"+provMaxHold.String()+" (past every order's maximum hold)")
}

// judgeProvider is ledgers (b) and (d), at settle.
func judgeProvider(w *world, cur *observation) []finding {
	if w.provider == provNone {
		return nil
	}
	var fs []finding
	add := func(ledger, class, format string, args ...any) {
		fs = append(fs, finding{ledger: ledger, class: ledger + " after settle, " + class, text: fmt.Sprintf(format, args...)})
	}
	p := cur.facts.prov
	// (b): every cancelled order whose session was ever opened has its
	// session closed, or its cancel left it open (at the cap, or a user's
	// or operator's cancel whose close failed) and that was counted. A
	// session whose payment completed is not open (nobody can pay on it):
	// its payment is judged by (d) and the money ledgers.
	for _, k := range slices.Sorted(maps.Keys(p.opened)) {
		r := cur.facts.reason[k]
		if r == "" {
			continue // never cancelled
		}
		if s := p.sess[k]; s.state == sessOpen && p.unclosed[k] == 0 {
			add("I18", "a cancelled order has its session open, uncounted",
				"order %s cancelled (%s), now %s, its session %s at the provider and no \"unclosed\" event", k, r, cur.orders[k].Status, s.state)
		}
	}
	// (d): a payment the provider took is never dropped.
	for _, pm := range payments {
		id, k := pm.key(), pm.orderKey()
		if !p.taken[id] {
			continue
		}
		if o := cur.orders[k]; !(o.exists && o.Status == expiry.StatusPaid) && cur.facts.refunds[id] == 0 {
			add("I14", "a payment the provider took is dropped", "payment %s taken by the provider: %s is %s, no refund", id, k, o.Status)
		}
	}
	return fs
}

// buyerOpens is the buyer of tenant tn's order no opening a payment
// session for it on the provider's page, while the order is pending (the
// host opens sessions for pending orders only): with the adapter of model
// m, before any session and any close (provBarring), or whenever it has
// none open or paid (provPlain: a closed session may be followed by a new
// one while the order is still pending).
func buyerOpens(tn int, no string, m provModel) kind {
	k := fmt.Sprintf("t%d/%s", tn, no)
	op := opOpens
	if m == provPlain {
		op = opOpensPlain
	}
	return kind{
		name:    fmt.Sprintf("buyer opens a payment session for %s (tenant %d)", no, tn),
		op:      op,
		tenant:  tn,
		touches: footprint{orderRes(tn, no): rd, provRes(tn, no): wr},
		enabled: func(s *observation) bool {
			st := s.facts.prov.sess[k].state
			return pending(s.order(tn, no)) && (st == sessNone || m == provPlain && st == sessClosed)
		},
		host: func(w *world) string {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.facts.prov.sess[k] = session{state: sessOpen}
			w.facts.prov.opened[k] = true
			return "open"
		},
	}
}

// buyerPays is the buyer completing the payment on its open session: the
// provider takes payment pm, and will deliver its callback (the pay step)
// until it is answered.
func buyerPays(pm payment) kind {
	k := pm.orderKey()
	return kind{
		name:    fmt.Sprintf("buyer completes the payment of %s on the provider with %s (tenant %d)", pm.order, pm.id, pm.tenant),
		op:      "buyer pays",
		tenant:  pm.tenant,
		touches: footprint{provRes(pm.tenant, pm.order): wr, payRes(pm.tenant, pm.id): wr},
		enabled: func(s *observation) bool { return s.facts.prov.sess[k].state == sessOpen },
		host: func(w *world) string {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.facts.prov.sess[k] = session{state: sessPaid, id: pm.id}
			w.facts.prov.taken[pm.key()] = true
			w.facts.issued[pm.key()] = true // the provider will call back until answered
			return "paid " + pm.id
		},
	}
}

// providerKind starts (down) or ends the provider's outage: while it
// lasts, every query and close errors.
func providerKind(tn int, down bool) kind {
	name := "provider up: its calls answer again"
	if down {
		name = "provider down: every query and close errors"
	}
	return kind{
		name:    name,
		op:      "provider outage",
		tenant:  tn,
		touches: footprint{provDownRes: wr},
		enabled: func(s *observation) bool { return s.facts.prov.down != down },
		host: func(w *world) string {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.facts.prov.down = down
			return map[bool]string{true: "down", false: "up"}[down]
		},
	}
}

// callbackKind is the provider's callback of payment pm (Service.Pay with
// its id), through instance inst: once the provider took it.
func callbackKind(inst int, pm payment) kind {
	i := slices.Index(payments, pm)
	k := payKind(inst, i)
	k.name = fmt.Sprintf("pay %s with %s: the provider's callback (tenant %d, instance %d)", pm.order, pm.id, pm.tenant, inst+1)
	enabled := k.enabled
	k.enabled = func(s *observation) bool { return s.facts.prov.taken[pm.key()] && enabled(s) }
	k.touches = maps.Clone(k.touches)
	k.touches.add(rd, provRes(pm.tenant, pm.order))
	return k
}

// paymentsInFlight is tenant 1's o1 with the provider wired (the barring
// adapter, provBarring): its placement, the buyer opening a session and
// paying on it, the provider's callback, its outage, the timeout (instance
// 1), reconcile rounds on both instances, the user's cancel (which never
// asks the provider) and the clock. One order: a round asks the provider
// about the orders of a batch concurrently (cancel.Service.ExpireDue, one
// goroutine per order), which the gate, driving one call at a time,
// cannot order deterministically; with one due order per round each
// operation makes one call at a time. (A second instance's timeout as well
// made the scenario's depth 7 take 26 s instead of 3.)
func paymentsInFlight() []kind { return paymentsInFlightWith(provBarring) }

// paymentsInFlightWith is the scenario's catalog with the provider model m.
func paymentsInFlightWith(m provModel) []kind {
	return withTwins([]kind{
		placeKind(1, 0, "o1", "u1", "a1"),
		buyerOpens(1, "o1", m),
		buyerPays(provPayment),
		callbackKind(1, provPayment),
		providerKind(1, true),
		providerKind(1, false),
		timeoutKind(1, 0, "o1"),
		userCancelKind(1, "o1"),
		roundKind(1, 0),
		roundKind(1, 1),
		clockKinds[0],
		clockKinds[1],
	})
}

// TestPaymentsInFlightPaths replays a few sequences of the scenario's
// catalog and checks that each reaches the provider's path it is named
// for (so that the exploration, which only judges outcomes, is known to
// go there), judged by the same ledgers after every step and at settle.
func TestPaymentsInFlightPaths(t *testing.T) {
	shared := wireTenants(t)
	kinds := paymentsInFlight()
	const o1 = "t1/o1"
	for _, tc := range []struct {
		name  string
		steps []spec
		want  func(t *testing.T, w *world, o orderView)
	}{
		{
			name:  "a session paid at the provider pays the order at its timeout",
			steps: []spec{{"place o1", 0}, {"buyer opens", 0}, {"buyer completes", 0}, {"timeout o1", 0}},
			want: func(t *testing.T, w *world, o orderView) {
				require.Equal(t, expiry.StatusPaid, o.Status)
				require.Zero(t, w.facts.refunds[provPayment.key()])
			},
		},
		{
			name:  "an open session re-arms the order ProviderRetry later",
			steps: []spec{{"place o1", 0}, {"buyer opens", 0}, {"timeout o1", 0}},
			want: func(t *testing.T, w *world, o orderView) {
				require.Equal(t, expiry.StatusPending, o.Status)
				require.Equal(t, provRetry, o.remaining, "re-armed ProviderRetry later")
			},
		},
		{
			name:  "an open session at the cap is closed and the order cancelled",
			steps: []spec{{"place o1", 0}, {"buyer opens", 0}, {"timeout o1", 0}, {"timeout o1", 0}},
			want: func(t *testing.T, w *world, o orderView) {
				require.Equal(t, expiry.StatusCancelled, o.Status)
				require.Equal(t, sessClosed, w.facts.prov.sess[o1].state)
				require.Zero(t, w.facts.prov.unclosed[o1])
			},
		},
		{
			name:  "at the cap with the provider down the order is cancelled, its session counted unclosed",
			steps: []spec{{"place o1", 0}, {"buyer opens", 0}, {"timeout o1", 0}, {"provider down", 0}, {"timeout o1", 0}, {"buyer completes", 0}},
			want: func(t *testing.T, w *world, o orderView) {
				require.Equal(t, expiry.StatusCancelled, o.Status)
				require.Equal(t, sessPaid, w.facts.prov.sess[o1].state)
				require.Equal(t, 1, w.facts.prov.unclosed[o1])
			},
		},
		{
			name: "the buyer pays between the query and the close: the close answers paid and pays the order",
			steps: []spec{{"place o1", 0}, {"clock: to the next deadline", 0}, {"reconcile round (tenant 1, instance 1)", 2},
				{"buyer opens", 0}, {"buyer completes", 0}, {"reconcile round (tenant 1, instance 1)", 0}},
			want: func(t *testing.T, w *world, o orderView) {
				require.Equal(t, expiry.StatusPaid, o.Status)
				require.Equal(t, sessPaid, w.facts.prov.sess[o1].state)
			},
		},
		{
			name:  "the buyer opens between the query and the close: the close closes it and the order is cancelled",
			steps: []spec{{"place o1", 0}, {"timeout o1", 2}, {"buyer opens", 0}, {"timeout o1", 0}},
			want: func(t *testing.T, w *world, o orderView) {
				require.Equal(t, expiry.StatusCancelled, o.Status)
				require.Equal(t, sessClosed, w.facts.prov.sess[o1].state)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newExplorer(kinds, shared, 1)
			defer x.pool.close()
			seq, err := resolve(kinds, tc.steps)
			require.NoError(t, err)
			fs, err := x.checkWith(seq, func(w *world) { tc.want(t, w, w.observe().orders[o1]) })
			require.NoError(t, err)
			out := x.explain(record{seq: seq, at: true})
			t.Logf("%s:\n%s", tc.name, out)
			var found []string
			for _, f := range fs {
				found = append(found, f.class+": "+f.text)
			}
			require.Empty(t, found, "the ledgers found violations in\n%s", out)
		})
	}
}
