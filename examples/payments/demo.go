package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/inproc"
	"github.com/seatflow/orderexpiry/reconcile"
)

// Options are the demo's windows and its extra random buyers. The zero
// value of a field takes the default in brackets.
type Options struct {
	Deadline        time.Duration // each order's payment window [1.5s]
	MaxHold         time.Duration // cancel.Config.MaxHold [4s]
	ProviderRetry   time.Duration // cancel.Config.ProviderRetry [300ms]
	ProviderTimeout time.Duration // cancel.Config.ProviderTimeout [250ms]
	ReconcileEvery  time.Duration // the reconciler's interval [700ms]
	Random          int           // buyers with random plans besides the ten scripted ones
	Seed            uint64        // their seed [from the time]
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Deadline, 1500*time.Millisecond)
	def(&o.MaxHold, 4*time.Second)
	def(&o.ProviderRetry, 300*time.Millisecond)
	def(&o.ProviderTimeout, 250*time.Millisecond)
	def(&o.ReconcileEvery, 700*time.Millisecond)
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano()%999_999) + 1
	}
}

// Env is what the demo runs on: the host's database and Redis, and a
// prefix for its order numbers and Redis namespace ("" on a fresh
// database and Redis of its own).
type Env struct {
	DB      *sql.DB
	Dialect sqlstore.Dialect
	Redis   redis.UniversalClient
	Prefix  string
}

// plan is what one buyer does, in times from the order's placement.
type plan struct {
	no, seat, label string
	scripted        bool
	openAt          time.Duration // goes to pay: the host opens a session (<0: never)
	ttl             time.Duration // the session's expires_at from its creation
	payAt           time.Duration // pays on the provider's page (<0: never)
	webhookAfter    time.Duration // the webhook arrives this long after the payment (<0: never)
	webhookTwice    bool          // the provider delivers it again
	loseMessage     bool          // the order's first expiry message is lost
	unreachableAt   time.Duration // the merchant's calls about its session hang from then (<0: never)
	reachableAt     time.Duration // ... until then (<0: for ever)
}

// OrderRun is one order as the demo ran it, for the report and the test.
type OrderRun struct {
	No, Show, Seat, Label string
	Scripted              bool
	SessionID             string    // the session the host gave the buyer ("" none)
	WantedSession         bool      // the buyer was to open one (a plan with a session)
	PlacedBefore          time.Time // the system clock just before the order was placed
	PaidByCallback        string    // the payment intent a webhook paid the order with
	Outcome               string
}

// CancelSeen is an order's cancel as the Observer saw it, right after the
// commit: the store's clock then, and its session at the provider then.
type CancelSeen struct {
	OrderNo, Reason string
	At              time.Time // the store's clock at the cancel
	SessionID       string    // "" without a session
	SessionStatus   string    // the session's status right after the cancel
}

// Report is what a run did: enough for the test to judge it from the
// stores and the provider, not from the demo's own bookkeeping.
type Report struct {
	Orders     []*OrderRun
	Cancels    []CancelSeen
	HookCalls  map[string]int // the refund hook's calls per payment id
	HookErrors []string
	Provider   *Checkout
	Namespace  string // the Redis namespace of the seats
	Show       string
	Totals     map[string]int
	Answers    map[string][]string // the provider's answers per order, as the library reported them
}

type demo struct {
	opts   Options
	env    Env
	out    io.Writer
	start  time.Time
	clock  *Clock
	api    *Checkout
	store  *sqlstore.Store
	seats  *redisseat.Seats
	svc    *cancel.Service
	pay    *Payments
	sender *inproc.Sender
	rec    *reconcile.Reconciler
	plans  []*plan
	byNo   map[string]*plan
	show   string

	mu       sync.Mutex
	rep      *Report
	runs     map[string]*OrderRun
	answered map[string][]string // the provider's answers per order, as the library reported them
	timed    map[string][]string // the same, each with its time since the start
	byProv   map[string]bool     // paid by the provider's answer
	totals   map[string]int
}

// Run places the orders, plays their buyers and the provider, runs
// timeouts and the reconciler until no order is pending, and prints what
// happened to each scripted order and the totals.
func Run(ctx context.Context, env Env, opts Options, out io.Writer) (*Report, error) {
	opts.defaults()
	d := &demo{opts: opts, env: env, out: out, clock: &Clock{}, byNo: map[string]*plan{},
		runs: map[string]*OrderRun{}, answered: map[string][]string{}, timed: map[string][]string{}, byProv: map[string]bool{}, totals: map[string]int{}}
	d.api = NewCheckout(d.clock)
	d.show = env.Prefix + "show1"
	d.rep = &Report{HookCalls: map[string]int{}, Provider: d.api, Show: d.show, Totals: d.totals, Answers: d.timed}
	d.makePlans()
	if err := d.wire(ctx); err != nil {
		return nil, err
	}
	defer d.store.Close()
	fmt.Fprintf(out, "payments: %d orders (%d scripted, %d random, seed %d), deadline %v, max hold %v, provider asked with a %v timeout, again after %v\n",
		len(d.plans), len(d.plans)-opts.Random, opts.Random, opts.Seed, opts.Deadline, opts.MaxHold, opts.ProviderTimeout, opts.ProviderRetry)
	if err := d.scenario(ctx); err != nil {
		return d.rep, err
	}
	d.report(ctx)
	return d.rep, nil
}

func (d *demo) makePlans() {
	D, H := d.opts.Deadline, d.opts.MaxHold
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	never := time.Duration(-1)
	add := func(p plan) {
		n := len(d.plans) + 1
		p.no, p.seat = fmt.Sprintf("%so%02d", d.env.Prefix, n), fmt.Sprintf("A%02d", n)
		if p.ttl == 0 {
			p.ttl = MaxSessionTTL
		}
		if p.unreachableAt == 0 {
			p.unreachableAt, p.reachableAt = never, never
		}
		d.plans = append(d.plans, &p)
		d.byNo[p.no] = &p
	}
	s := func(label string, p plan) { p.label, p.scripted = label, true; add(p) }
	s("pays; the webhook comes at once, and again", plan{openAt: ms(100), payAt: ms(300), webhookAfter: ms(50), webhookTwice: true})
	s("pays; the webhook never comes", plan{openAt: ms(100), payAt: ms(400), webhookAfter: never})
	s("pays just before the deadline; the webhook comes 2s late", plan{openAt: ms(100), payAt: D - ms(150), webhookAfter: 2 * time.Second})
	s("still on the payment page at the deadline; pays 1s after it", plan{openAt: ms(100), payAt: D + time.Second, webhookAfter: ms(100)})
	s("leaves the payment page open; comes back to pay after the max hold", plan{openAt: ms(100), payAt: H + ms(500), webhookAfter: ms(50)})
	s("never goes to pay", plan{openAt: never, payAt: never, webhookAfter: never})
	s("its session reaches expires_at (30 min, the minimum); pays after", plan{openAt: ms(100), ttl: MinSessionTTL, payAt: D*6/10 + ms(100), webhookAfter: ms(50)})
	s("pays; the webhook never comes; the order's expiry message is lost", plan{openAt: ms(100), payAt: ms(400), webhookAfter: never, loseMessage: true})
	// Two seconds past the max hold: each ask of an unreachable provider
	// waits out ProviderTimeout, the close at the cap too, so under a
	// loaded race run the cap's cancel came more than 0.8 s late (CI run
	// 121) and the payment found the order still pending.
	s("the provider is unreachable about its session; pays after the max hold", plan{openAt: ms(100), unreachableAt: ms(200), reachableAt: never, payAt: H + 2*time.Second, webhookAfter: ms(50)})
	s("pays at the deadline, as the timeout closes the session", plan{openAt: ms(100), payAt: D, webhookAfter: ms(50)})

	rng := rand.New(rand.NewPCG(d.opts.Seed, 0xc4ec))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	for i := 0; i < d.opts.Random; i++ {
		p := plan{openAt: never, payAt: never, webhookAfter: never, unreachableAt: never, reachableAt: never}
		if rng.IntN(4) > 0 {
			p.openAt = between(ms(50), D*4/10)
			if rng.IntN(4) > 0 {
				p.payAt = between(ms(200), H+ms(500))
				if rng.IntN(10) > 2 {
					p.webhookAfter = between(0, 2500*time.Millisecond)
				}
				p.webhookTwice = rng.IntN(5) == 0
			}
			if rng.IntN(10) == 0 {
				p.unreachableAt = p.openAt + between(ms(50), D)
				p.reachableAt = p.unreachableAt + between(ms(200), H)
			}
		}
		p.loseMessage = rng.IntN(7) == 0
		p.label = "random"
		add(p)
	}
}

func (d *demo) wire(ctx context.Context) error {
	var err error
	if d.store, err = sqlstore.New(d.env.DB, d.env.Dialect); err != nil {
		return err
	}
	if err := d.store.Migrate(ctx); err != nil {
		return err
	}
	ns := redisseat.DefaultNamespace
	if d.env.Prefix != "" {
		ns = "oe-" + strings.TrimSuffix(d.env.Prefix, "-")
	}
	d.rep.Namespace = ns
	if d.seats, err = redisseat.New(d.env.Redis, ns); err != nil {
		return err
	}
	// A new namespace: nothing to rebuild from SQL (see examples/seatflow).
	if token, lost, err := d.seats.Lost(ctx); err != nil {
		return err
	} else if lost {
		if err := d.seats.MarkRestored(ctx, token); err != nil {
			return err
		}
	}
	// The host's adapter, on its own table in the same database. It opens
	// sessions for orders that are pending and not yet due only.
	d.pay, err = NewPayments(ctx, d.env.DB, d.env.Dialect, d.api, func(ctx context.Context, no string) (bool, error) {
		o, err := d.store.Order(ctx, no)
		if err != nil {
			return false, err
		}
		return o.Status == expiry.StatusPending && o.Remaining() > 0, nil
	})
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	rt := expiry.Runtime{Observer: d, Logger: logger}
	d.sender = inproc.New(inproc.Config{Runtime: rt})
	lost := map[string]bool{}
	for _, p := range d.plans {
		lost[p.no] = p.loseMessage
	}
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: lossySender{d.sender, lost}, Runtime: rt})
	if err != nil {
		return err
	}
	d.svc, err = cancel.New(cancel.Config{Store: d.store, Seats: d.seats, Scheduler: sched, Runtime: rt,
		OnDiscrepancy:   d.refund,
		Provider:        d.pay,
		ProviderTimeout: d.opts.ProviderTimeout,
		ProviderRetry:   d.opts.ProviderRetry,
		MaxHold:         d.opts.MaxHold,
	})
	if err != nil {
		return err
	}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: d.svc, Sender: d.sender, Runtime: rt})
	if err != nil {
		return err
	}
	d.sender.Attach(expiry.NewShell(h))
	d.rec, err = reconcile.New(reconcile.Config{Orders: d.store, Seats: d.seats, Service: d.svc, Runtime: rt})
	return err
}

// refund is the host's refund hook: a payment the order could not take is
// refunded at the provider, keyed by its payment id, so a second call of
// the hook (after an error) refunds nothing more.
func (d *demo) refund(ctx context.Context, x cancel.Discrepancy) error {
	r, err := d.api.Refund(ctx, x.PaymentID, "refund-"+x.PaymentID)
	d.mu.Lock()
	d.rep.HookCalls[x.PaymentID]++
	if err != nil {
		d.rep.HookErrors = append(d.rep.HookErrors, fmt.Sprintf("%s of %s: %v", x.PaymentID, x.OrderNo, err))
	}
	d.mu.Unlock()
	if err == nil {
		d.logf(x.OrderNo, "refund hook: %s refunded (%s)", x.PaymentID, r.ID)
	}
	return err
}

// Observe is the demo's expiry.Observer: what the library decided.
func (d *demo) Observe(_ context.Context, e expiry.Event) {
	switch e.Kind {
	case expiry.KindProviderAnswered:
		d.mu.Lock()
		d.answered[e.OrderNo] = append(d.answered[e.OrderNo], e.Reason)
		d.timed[e.OrderNo] = append(d.timed[e.OrderNo], fmt.Sprintf("%s@%.3fs", e.Reason, time.Since(d.start).Seconds()))
		if e.Err == nil && (e.Reason == "paid" || e.Reason == "close_paid") {
			d.byProv[e.OrderNo] = true
		}
		d.mu.Unlock()
		d.logf(e.OrderNo, "provider asked: %s", e.Reason)
	case expiry.KindCancelled:
		c := CancelSeen{OrderNo: e.OrderNo, Reason: e.Reason, At: e.At}
		if s, ok := d.api.PeekOrder(e.OrderNo); ok {
			c.SessionID, c.SessionStatus = s.ID, s.Status
		}
		d.mu.Lock()
		d.rep.Cancels = append(d.rep.Cancels, c)
		d.mu.Unlock()
		d.logf(e.OrderNo, "cancelled (%s); its session: %s", e.Reason, orNone(c.SessionStatus))
	case expiry.KindPaid:
		d.logf(e.OrderNo, "paid, seat sold")
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// logf prints a timeline line for a scripted order.
func (d *demo) logf(no, format string, args ...any) {
	p := d.byNo[no]
	if p == nil || !p.scripted {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "  %+6.2fs  %-4s %s\n", time.Since(d.start).Seconds(), strings.TrimPrefix(no, d.env.Prefix), fmt.Sprintf(format, args...))
}

// scenario places the orders, plays the buyers and the provider, and waits
// until every order is decided and every buyer is done.
func (d *demo) scenario(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	d.start = time.Now()
	recDone := make(chan error, 1)
	go func() { recDone <- d.rec.Run(ctx, d.opts.ReconcileEvery) }()
	defer func() {
		stop()
		<-recDone
		if err := d.sender.Close(); err != nil {
			slog.Error("closing the sender", "err", err)
		}
	}()

	for _, p := range d.plans {
		before := time.Now()
		pl := cancel.Placement{OrderNo: p.no, UserID: "u-" + strings.TrimPrefix(p.no, d.env.Prefix), ShowID: d.show, Seats: []string{p.seat},
			ExpireAt: time.Now().Add(d.opts.Deadline)}
		if err := d.svc.Place(ctx, pl, d.store.Insert(d.env.DB, nil)); err != nil {
			return fmt.Errorf("place %s: %w", p.no, err)
		}
		run := &OrderRun{No: p.no, Show: d.show, Seat: p.seat, Label: p.label, Scripted: p.scripted, PlacedBefore: before, WantedSession: p.openAt >= 0}
		d.runs[p.no] = run
		d.rep.Orders = append(d.rep.Orders, run)
		what := "placed, due in " + d.opts.Deadline.String()
		if p.loseMessage {
			what += "; its expiry message is lost"
		}
		d.logf(p.no, "%s: %s", what, p.label)
	}
	placed := time.Now()

	var wg sync.WaitGroup
	at := func(after time.Duration, f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTimer(time.Until(placed.Add(after)))
			defer t.Stop()
			select {
			case <-t.C:
				f()
			case <-ctx.Done():
			}
		}()
	}
	// The provider's clock reaches the 30-minute sessions' expires_at.
	at(d.opts.Deadline*6/10, func() { d.clock.Advance(MinSessionTTL + time.Minute) })
	for _, p := range d.plans {
		d.buyer(ctx, p, at)
	}

	limit := time.Now().Add(d.opts.MaxHold + 8*time.Second)
	buyersDone := make(chan struct{})
	go func() { wg.Wait(); close(buyersDone) }()
	for {
		pending := 0
		for _, p := range d.plans {
			o, err := d.store.Order(ctx, p.no)
			if err != nil {
				return err
			}
			if o.Status == expiry.StatusPending {
				pending++
			}
		}
		select {
		case <-buyersDone:
			if pending == 0 {
				return nil
			}
		default:
		}
		if time.Now().After(limit) {
			return fmt.Errorf("%d orders still pending %v after placing", pending, time.Since(placed).Round(time.Millisecond))
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// buyer schedules what the buyer of p does, and the provider's webhooks.
func (d *demo) buyer(ctx context.Context, p *plan, at func(time.Duration, func())) {
	if p.openAt < 0 {
		return
	}
	// The session, once the host opened it: what the buyer pays and the
	// partition cuts off happen after that, however late the opening.
	var sid string
	opened := make(chan struct{})
	at(p.openAt, func() {
		defer close(opened)
		s, err := d.pay.Open(ctx, p.no, 4200, p.ttl)
		if err != nil {
			d.logf(p.no, "the host could not open a session: %v", err)
			return
		}
		sid = s.ID
		d.mu.Lock()
		d.runs[p.no].SessionID = s.ID
		d.mu.Unlock()
		d.logf(p.no, "session %s opened, expires_at in %v", s.ID, s.ExpiresAt.Sub(s.Created))
	})
	session := func() string {
		select {
		case <-opened:
			return sid
		case <-ctx.Done():
			return ""
		}
	}
	if p.unreachableAt >= 0 {
		at(p.unreachableAt, func() {
			if id := session(); id != "" {
				d.api.Unreachable(id, true)
				d.logf(p.no, "the provider stops answering the host about %s", id)
			}
		})
		if p.reachableAt >= 0 {
			at(p.reachableAt, func() {
				if id := session(); id != "" {
					d.api.Unreachable(id, false)
					d.logf(p.no, "the provider answers again about %s", id)
				}
			})
		}
	}
	if p.payAt < 0 {
		return
	}
	at(p.payAt, func() {
		id := session()
		if id == "" {
			return
		}
		s, err := d.api.Complete(id)
		if err != nil {
			d.count("buyer_refused")
			d.logf(p.no, "the buyer tries to pay: refused, the session is %s", s.Status)
			return
		}
		d.count("provider_payments")
		d.logf(p.no, "the buyer pays: %s", s.PaymentIntent)
		if p.webhookAfter < 0 {
			return
		}
		deliver := func() {
			d.webhook(ctx, s)
		}
		at(p.payAt+p.webhookAfter, deliver)
		if p.webhookTwice {
			at(p.payAt+p.webhookAfter+200*time.Millisecond, deliver)
		}
	})
}

// webhook is the host's checkout.session.completed handler: the payment
// callback, with the session's payment intent as the payment id.
func (d *demo) webhook(ctx context.Context, s Session) {
	res, err := d.svc.Pay(ctx, cancel.Payment{OrderNo: s.ClientReferenceID, PaymentID: s.PaymentIntent})
	switch {
	case err == nil && res.Changed:
		d.mu.Lock()
		d.runs[s.ClientReferenceID].PaidByCallback = s.PaymentIntent
		d.mu.Unlock()
		d.logf(s.ClientReferenceID, "webhook %s: paid the order", s.PaymentIntent)
	case err == nil:
		d.count("webhooks_no_change")
		d.logf(s.ClientReferenceID, "webhook %s: already paid with it, nothing changes", s.PaymentIntent)
	case errors.Is(err, cancel.ErrDiscrepancy):
		d.logf(s.ClientReferenceID, "webhook %s: the order is cancelled: refunded", s.PaymentIntent)
	default:
		d.logf(s.ClientReferenceID, "webhook %s: %v (the provider retries it)", s.PaymentIntent, err)
	}
}

func (d *demo) count(k string) {
	d.mu.Lock()
	d.totals[k]++
	d.mu.Unlock()
}

// report prints what happened to each order and the totals.
func (d *demo) report(ctx context.Context) {
	refunded := map[string]bool{}
	for _, r := range d.api.Refunds() {
		refunded[r.PaymentIntent] = true
	}
	paidWith := map[string]string{} // order → the payment the provider took for it
	for _, pm := range d.api.Payments() {
		paidWith[pm.OrderNo] = pm.PaymentIntent
	}
	fmt.Fprintln(d.out, "what happened:")
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.plans {
		run := d.runs[p.no]
		o, err := d.store.Order(ctx, p.no)
		if err != nil {
			run.Outcome = "unreadable: " + err.Error()
			continue
		}
		s, hasSession := d.api.PeekOrder(p.no)
		pi := paidWith[p.no]
		switch {
		case o.Status == expiry.StatusPaid && run.PaidByCallback != "":
			run.Outcome = "paid by callback (" + run.PaidByCallback + ")"
			d.totals["paid_by_callback"]++
		case o.Status == expiry.StatusPaid && d.byProv[p.no]:
			run.Outcome = "paid by the provider's answer (" + pi + ")"
			d.totals["paid_by_provider"]++
		case o.Status == expiry.StatusPaid:
			run.Outcome = "paid"
			d.totals["paid_other"]++
		case o.Status == expiry.StatusCancelled && pi != "" && refunded[pi]:
			run.Outcome = "cancelled, its payment " + pi + " refunded"
			d.totals["cancelled_refunded"]++
		case o.Status == expiry.StatusCancelled && hasSession:
			run.Outcome = "cancelled, session " + s.Status
			d.totals["cancelled_session_"+s.Status]++
		case o.Status == expiry.StatusCancelled:
			run.Outcome = "cancelled, no session"
			d.totals["cancelled_no_session"]++
		default:
			run.Outcome = o.Status.String()
			d.totals["other"]++
		}
		if p.scripted {
			fmt.Fprintf(d.out, "  %-4s %-66s -> %s; provider asked: %s\n", strings.TrimPrefix(p.no, d.env.Prefix), p.label, run.Outcome, orNone(squeeze(d.answered[p.no])))
		}
	}
	d.totals["orders"] = len(d.plans)
	d.totals["refunds"] = len(d.api.Refunds())
	keys := make([]string, 0, len(d.totals))
	for k := range d.totals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, d.totals[k])
	}
	fmt.Fprintf(d.out, "totals:%s\n", b.String())
}

// lossySender loses the first expiry message of some orders, as a crash
// between the commit and the send would: the reconciler alone finds them.
type lossySender struct {
	expiry.DelaySender
	lose map[string]bool // read-only
}

func (l lossySender) Send(ctx context.Context, m expiry.Message, delay time.Duration) error {
	if m.Hop == 1 && l.lose[m.OrderNo] {
		return nil
	}
	return l.DelaySender.Send(ctx, m, delay)
}

// squeeze joins answers, repeats counted: "open×4,closed".
func squeeze(answers []string) string {
	var out []string
	for i := 0; i < len(answers); {
		j := i
		for j < len(answers) && answers[j] == answers[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s×%d", answers[i], j-i))
		} else {
			out = append(out, answers[i])
		}
		i = j
	}
	return strings.Join(out, ",")
}
