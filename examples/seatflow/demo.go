package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

const (
	purchaseLimit  = 6 // seats one user may hold in one show
	reconcileEvery = 2 * time.Second
	// settleTime is the reconciler's Settle: how long it leaves an order
	// decided moments ago to the instance that decided it (short here, so
	// the demo's repairs show within a round or two).
	settleTime = time.Second
	minExpiry  = 2 * time.Second
	maxExpiry  = 8 * time.Second
	raceDelay  = 5 * time.Millisecond // the racers start this long after expire_at
	visitor    = "visitor"            // the user of the rejected placements
)

// kind is what the scenario does with an order.
type kind uint8

const (
	kindExpire       kind = iota // nobody acts: the timeout cancels it
	kindPay                      // paid before it is due
	kindCancel                   // cancelled by its user before it is due
	kindRace                     // payment, user cancel and timeout at once, just after it is due
	kindDiscrepancy              // another user's cancel is refused, the owner cancels, then the payment arrives
	kindLostMessage              // its first message is lost (injected): the reconciler cancels it
	kindReleaseFails             // expires, but the seat release fails once (injected): the reconciler frees them
)

type plan struct {
	no, user, show string
	seats          []string
	kind           kind
	expiry, act    time.Duration
	placedAt       time.Time
	expireAt       time.Time
}

func (p *plan) intent() string {
	switch p.kind {
	case kindPay:
		return fmt.Sprintf("will pay at +%.2fs", p.act.Seconds())
	case kindCancel:
		return fmt.Sprintf("user will cancel at +%.2fs", p.act.Seconds())
	case kindRace:
		return "will race when due"
	case kindDiscrepancy:
		return "will cancel, then pay"
	case kindLostMessage:
		return "will expire, message lost (injected)"
	case kindReleaseFails:
		return "will expire, seat release fails once (injected)"
	default:
		return "will expire"
	}
}

// discrepancy is one call of the refund hook.
type discrepancy struct{ orderNo, paymentID string }

// demo is the ticketing service and its scenario.
type demo struct {
	cfg    config
	tl     *timeline
	rng    *rand.Rand
	prefix string // run prefix of every id on real servers, "" otherwise

	plans  []*plan
	byNo   map[string]*plan // read-only once planned
	extras []string         // order numbers that must never exist nor be sent
	shows  []string
	free   map[string][]string // seats of each show not yet given to an order
	nUsers int

	env   *env
	store *sqlstore.Store
	seats *redisseat.Seats
	svc   *cancel.Service
	h     *expiry.Handler
	shell *expiry.Shell
	sched *expiry.Scheduler
	rec   *reconcile.Reconciler
	tr    *transport

	mu            sync.Mutex
	decided       map[string][]string // what the library reported per order: "paid", "cancelled(timeout)"
	lastDecided   time.Time
	lastSend      map[string]sendInfo
	sends         map[string]int
	hops, rearms  int
	repairedSeats int
	badMessages   int
	discrepant    []discrepancy // the refund hook's calls
	problems      []string
	races         int
	rejected      int
	rolledBack    int
}

// run runs the whole demo and prints its timeline, checks and summary to out.
func run(ctx context.Context, cfg config, out io.Writer) (err error) {
	if err := cfg.validate(); err != nil {
		return &setupError{err}
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano()%999_999) + 1
	}
	d := &demo{
		cfg: cfg, tl: &timeline{w: out}, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5ea7f10)),
		byNo: map[string]*plan{}, free: map[string][]string{},
		decided: map[string][]string{}, lastSend: map[string]sendInfo{}, sends: map[string]int{},
	}
	tr, err := newTransport(cfg, d)
	if err != nil {
		return err
	}
	d.tr = tr
	defer func() { // the scenario closes it: then this does nothing
		if cerr := tr.close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	e, err := openEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := e.close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	d.env = e
	if e.sharedSQL || e.sharedRedis {
		d.prefix = runPrefix()
	}
	d.makePlans()
	if err := d.wire(ctx); err != nil {
		return err
	}
	d.header()
	if err := d.scenario(ctx); err != nil {
		return err
	}
	return d.verify(ctx)
}

// wire builds the service: the same calls a host makes, plus two injected
// faults (a lost message, a failed seat release) for the reconciler to repair.
func (d *demo) wire(ctx context.Context) error {
	store, err := sqlstore.New(d.env.db, d.env.dialect)
	if err != nil {
		return setupErrorf("sqlstore: %w", err)
	}
	if err := store.Migrate(ctx); err != nil {
		return setupErrorf("%w", err)
	}
	// On a shared Redis each run keeps its keys in a namespace of its own,
	// so its reconciler never sees (and releases) another run's locks.
	ns := redisseat.DefaultNamespace
	if d.prefix != "" {
		ns = "oe-" + strings.TrimSuffix(d.prefix, "-")
	}
	seats, err := redisseat.New(d.env.rdb, ns)
	if err != nil {
		return setupErrorf("redisseat: %w", err)
	}
	d.store, d.seats = store, seats

	level := slog.LevelError
	if d.cfg.Verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(d.tl, &slog.HandlerOptions{Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{} // the timeline has its own clock
			}
			return a
		}}))

	failOnce := map[string]bool{}
	dropFirst := map[string]bool{}
	for _, p := range d.plans {
		failOnce[p.no] = p.kind == kindReleaseFails
		dropFirst[p.no] = p.kind == kindLostMessage
	}
	if d.sched, err = expiry.NewScheduler(expiry.SchedulerConfig{Sender: lossySender{d.tr.sender, dropFirst}, Runtime: expiry.Runtime{Observer: d, Logger: logger}}); err != nil {
		return err
	}
	if d.svc, err = cancel.New(cancel.Config{
		Store:     store,
		Scheduler: d.sched, // the expiry message, once the placing transaction committed
		Seats:     &flakyReleaser{SeatStore: d.seats, failOnce: failOnce},
		// the refund hook runs once per payment id
		Runtime: expiry.Runtime{Observer: d, Logger: logger},

		OnDiscrepancy: d.onDiscrepancy,
	}); err != nil {
		return err
	}
	if d.h, err = expiry.NewHandler(expiry.HandlerConfig{Canceller: d.svc, Sender: d.tr.sender, Runtime: expiry.Runtime{Observer: d, Logger: logger}}); err != nil {
		return err
	}
	d.shell = expiry.NewShell(d.h)
	if err := d.tr.attach(d.shell); err != nil {
		return setupErrorf("%w", err)
	}
	// The reconciler rebuilds Redis from SQL if it loses its data.
	if d.rec, err = reconcile.New(reconcile.Config{Orders: store, Seats: d.seats, Service: d.svc, Settle: settleTime, Runtime: expiry.Runtime{Observer: d, Logger: logger}}); err != nil {
		return err
	}
	// This run's namespace is new, so complete: nothing to rebuild. (A
	// long-lived service does not do this; its reconciler's first round
	// checks the store against SQL.)
	token, lost, err := d.seats.Lost(ctx)
	if err != nil {
		return setupErrorf("redisseat: %w", err)
	}
	if lost {
		if err := d.seats.MarkRestored(ctx, token); err != nil {
			return setupErrorf("redisseat: %w", err)
		}
	}
	return nil
}

func (d *demo) header() {
	d.tl.plain("seatflow: %d orders, seed %d, purchase limit %d seats per user and show, reconcile every %v",
		len(d.plans), d.cfg.Seed, purchaseLimit, reconcileEvery)
	for _, a := range d.env.about {
		d.tl.plain("  %s", a)
	}
	d.tl.plain("  %s", d.tr.about)
	if d.prefix != "" {
		d.tl.plain("  run prefix %q on every order and show id", d.prefix)
	}
	d.tl.plain("")
	d.tl.width = len(d.plans[len(d.plans)-1].no)
	for _, x := range d.extras {
		d.tl.width = max(d.tl.width, len(x))
	}
	d.tl.start = time.Now()
}

// makePlans decides every order of the batch: user, show, seats, expiry and
// what will happen to it.
func (d *demo) makePlans() {
	n := d.cfg.Orders
	for i := range max(3, n/20) {
		d.addShow(i)
	}
	d.nUsers = max(8, n/3)
	kinds := make([]kind, 0, n)
	add := func(k kind, count int) {
		for ; count > 0 && len(kinds) < n; count-- {
			kinds = append(kinds, k)
		}
	}
	add(kindRace, min(3, n/4))
	add(kindDiscrepancy, 1)
	if n >= 6 {
		add(kindLostMessage, 1)
		add(kindReleaseFails, 1)
	}
	for len(kinds) < n {
		switch r := d.rng.IntN(100); {
		case r < 35:
			add(kindPay, 1)
		case r < 55:
			add(kindCancel, 1)
		default:
			add(kindExpire, 1)
		}
	}
	d.rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })

	held := map[[2]string]int{}
	digits := max(2, len(strconv.Itoa(n)))
	for i, k := range kinds {
		p := &plan{no: fmt.Sprintf("%so%0*d", d.prefix, digits, i+1), kind: k}
		count := 1 + d.rng.IntN(4)
		p.show = d.showWithRoom(count)
		p.seats = d.take(p.show, count)
		u := d.rng.IntN(d.nUsers)
		for held[[2]string{p.show, d.user(u)}]+count > purchaseLimit {
			u++ // users past nUsers are new users: always room
		}
		p.user = d.user(u)
		held[[2]string{p.show, p.user}] += count
		switch k {
		case kindRace:
			p.expiry = minExpiry + d.ms(1000)
		case kindLostMessage:
			p.expiry = 3 * time.Second
		case kindDiscrepancy:
			p.expiry = 4*time.Second + d.ms(2000)
		default:
			p.expiry = minExpiry + d.ms(int(maxExpiry-minExpiry)/int(time.Millisecond))
		}
		p.act = 300*time.Millisecond + d.ms(int(p.expiry/time.Millisecond)-800)
		d.plans = append(d.plans, p)
		d.byNo[p.no] = p
	}
	d.extras = []string{d.prefix + "x-taken", d.prefix + "x-limit", d.prefix + "x-rollback"}
}

func (d *demo) ms(n int) time.Duration { return time.Duration(d.rng.IntN(n+1)) * time.Millisecond }

func (d *demo) user(i int) string { return fmt.Sprintf("u%02d", i+1) }

func (d *demo) addShow(i int) string {
	show := fmt.Sprintf("%sshow-%d", d.prefix, i+1)
	seats := make([]string, 0, 100)
	for row := 'A'; row <= 'J'; row++ {
		for num := 1; num <= 10; num++ {
			seats = append(seats, fmt.Sprintf("%c%02d", row, num))
		}
	}
	d.rng.Shuffle(len(seats), func(i, j int) { seats[i], seats[j] = seats[j], seats[i] })
	d.shows = append(d.shows, show)
	d.free[show] = seats
	return show
}

// spareSeats are kept free in every show for the rejected placements.
const spareSeats = 12

// showWithRoom picks a show with count free seats and spareSeats to spare,
// opening a new show when all are full.
func (d *demo) showWithRoom(count int) string {
	start := d.rng.IntN(len(d.shows))
	for i := range d.shows {
		if s := d.shows[(start+i)%len(d.shows)]; len(d.free[s]) >= count+spareSeats {
			return s
		}
	}
	return d.addShow(len(d.shows))
}

func (d *demo) take(show string, count int) []string {
	seats := d.free[show][:count:count]
	d.free[show] = d.free[show][count:]
	return seats
}

// place is how a host places an order: cancel.Service.Place locks the seats
// in Redis (all or nothing, within the purchase limit), then runs the host's
// SQL transaction (sqlstore.Store.Insert), which inserts the order and runs
// check, and once it has committed sends the expiry message
// (Config.Scheduler). check is the host's
// other work in the same transaction (stock, coupons, audit rows); nil for
// none.
//
// If the transaction fails, the order does not exist and no message was sent
// (invariant I6), so Place gives the seats back at once (a failed release is
// logged, and the reconciler frees them once its grace period has passed, as
// it would had the process died). Only a commit whose outcome is unknown
// keeps them: the order may exist, and the reconciler decides.
func (d *demo) place(ctx context.Context, p cancel.Placement, check func(ctx context.Context, tx *sql.Tx) error) error {
	p.Limit = purchaseLimit
	var rows func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error
	if check != nil {
		rows = func(ctx context.Context, tx *sql.Tx, _ cancel.Placement) error { return check(ctx, tx) }
	}
	return d.svc.Place(ctx, p, d.store.Insert(d.env.db, rows))
}

// scenario places the batch, acts on it, waits until no order is pending and
// stops the service; verify then reads the stores.
func (d *demo) scenario(ctx context.Context) error {
	sctx, stopScenario := context.WithCancel(ctx)
	var bg sync.WaitGroup
	var once sync.Once
	settled := false
	stop := func() {
		once.Do(func() {
			stopScenario()
			bg.Wait()
			left := d.tr.inFlight()
			if err := d.tr.close(); err != nil {
				d.tl.say("", "the transport did not close cleanly: %v", err)
			}
			why := ""
			if settled {
				why = " (late hops of decided orders)"
			}
			d.tl.say("", "service stopped; %d undelivered messages dropped with the transport%s", left, why)
		})
	}
	defer stop()
	bg.Go(func() {
		if err := d.rec.Run(sctx, reconcileEvery); sctx.Err() == nil {
			d.problem("the reconciler stopped: %v", err)
		}
	})

	var actions sync.WaitGroup
	gap := min(20*time.Millisecond, 800*time.Millisecond/time.Duration(len(d.plans)))
	for _, p := range d.plans {
		p.placedAt = time.Now()
		p.expireAt = p.placedAt.Add(p.expiry)
		pl := cancel.Placement{OrderNo: p.no, UserID: p.user, ShowID: p.show, Seats: p.seats, ExpireAt: p.expireAt}
		if err := d.place(sctx, pl, nil); err != nil {
			return fmt.Errorf("place %s: %w", p.no, err)
		}
		d.mu.Lock()
		s, sent := d.lastSend[p.no]
		d.mu.Unlock()
		hop := fmt.Sprintf("hop 1 level %d (%v)", s.level, s.delay)
		if !sent {
			hop = "hop 1 LOST in transit (injected)"
		}
		d.tl.say(p.no, "placed: %s %s %s, due in %.2fs; %s; %s",
			p.user, p.show, strings.Join(p.seats, ","), p.expiry.Seconds(), hop, p.intent())
		actions.Go(func() { d.act(sctx, p) })
		if !sleepUntil(sctx, p.placedAt.Add(gap)) {
			break
		}
	}
	d.rejections(sctx)
	actionsDone := make(chan struct{})
	bg.Go(func() { actions.Wait(); close(actionsDone) })
	ok, err := d.waitSettled(sctx, actionsDone)
	if err != nil {
		return err
	}
	settled = ok
	stop()

	// The final round comes after the settle time of the last decision: a
	// seat release that failed just before is then the reconciler's.
	d.mu.Lock()
	last := d.lastDecided
	d.mu.Unlock()
	if wait := time.Until(last.Add(settleTime)); wait > 0 {
		d.tl.say("", "waiting %v: the reconciler leaves an order decided less than %v ago to the instance that decided it", wait.Round(time.Millisecond), settleTime)
		if !sleepUntil(ctx, last.Add(settleTime)) {
			return fmt.Errorf("interrupted: %w", ctx.Err())
		}
	}
	rep, err := d.rec.Round(ctx)
	if err != nil {
		return fmt.Errorf("final reconcile round: %w", err)
	}
	d.tl.say("", "final reconcile round: expired=%d released=%d sold=%d (seat pass complete: %v)", rep.Expired, rep.Released, rep.Sold, rep.Complete)
	return nil
}

// act does what the plan says, at its time.
func (d *demo) act(ctx context.Context, p *plan) {
	switch p.kind {
	case kindPay:
		if sleepUntil(ctx, p.placedAt.Add(p.act)) {
			won, what := d.pay(ctx, p.no, paymentID(p.no))
			if !won {
				d.tl.say(p.no, "payment %s", what)
				return
			}
			// The provider repeats its callback: the same payment id
			// changes nothing and is not an error.
			if _, what := d.pay(ctx, p.no, paymentID(p.no)); what != "changed nothing (already paid by this payment)" {
				d.problem("%s: repeated payment callback %s", p.no, what)
			}
		}
	case kindCancel:
		if sleepUntil(ctx, p.placedAt.Add(p.act)) {
			if _, what := d.userCancel(ctx, p.no, p.user); what != "won" {
				d.tl.say(p.no, "user cancel %s", what)
			}
		}
	case kindRace:
		if sleepUntil(ctx, p.expireAt.Add(raceDelay)) {
			d.race(ctx, p)
		}
	case kindDiscrepancy:
		d.discrepancy(ctx, p)
	}
}

// paymentID is the payment provider's id of the demo's one payment of order no.
func paymentID(no string) string { return "pay-" + no }

// pay is the payment provider's callback: it carries the provider's payment
// id and no user.
func (d *demo) pay(ctx context.Context, no, paymentID string) (won bool, what string) {
	res, err := d.svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: paymentID})
	switch {
	case errors.Is(err, cancel.ErrDiscrepancy):
		return false, "lost (discrepancy)"
	case err != nil:
		d.problem("pay %s: %v", no, err)
		return false, "failed"
	case res.Changed:
		return true, "won"
	case res.Order.Status == expiry.StatusPaid && res.PaymentID == paymentID:
		return false, "changed nothing (already paid by this payment)"
	default:
		return false, "changed nothing (already " + res.Order.Status.String() + ")"
	}
}

func (d *demo) userCancel(ctx context.Context, no, user string) (won bool, what string) {
	res, err := d.svc.UserCancel(ctx, no, user)
	switch {
	case errors.Is(err, cancel.ErrNotOwner):
		return false, "refused (not the owner)"
	case err != nil:
		d.problem("user cancel %s: %v", no, err)
		return false, "failed"
	case res.Changed:
		return true, "won"
	default:
		return false, "lost (already " + res.Order.Status.String() + ")"
	}
}

// timeout is the timer firing: the Handler, as the consumer shell calls it.
func (d *demo) timeout(ctx context.Context, no string) (won bool, what string) {
	out, err := d.h.Handle(ctx, expiry.Message{OrderNo: no, Hop: 1})
	switch {
	case err != nil:
		d.problem("timeout %s: %v", no, err)
		return false, "failed"
	case out == expiry.OutcomeCancelled:
		return true, "won"
	default:
		return false, "lost (" + out.String() + ")"
	}
}

// race fires the payment callback, the user's cancel and the timeout at the
// same instant, just after the order fell due; the scheduled message arrives
// about then too. Exactly one may change the order.
func (d *demo) race(ctx context.Context, p *plan) {
	d.tl.say(p.no, "RACE: payment, user cancel and timeout fire at once")
	type result struct {
		won  bool
		what string
	}
	var pay, usr, tmo result
	var wg sync.WaitGroup
	start := make(chan struct{})
	wg.Go(func() { <-start; pay.won, pay.what = d.pay(ctx, p.no, paymentID(p.no)) })
	wg.Go(func() { <-start; usr.won, usr.what = d.userCancel(ctx, p.no, p.user) })
	wg.Go(func() { <-start; tmo.won, tmo.what = d.timeout(ctx, p.no) })
	close(start)
	wg.Wait()
	o, err := d.store.Order(ctx, p.no)
	if err != nil {
		d.problem("race %s: read order: %v", p.no, err)
		return
	}
	winners, by := 0, "the scheduled message was first"
	for _, r := range []struct {
		result
		name string
	}{{pay, "payment"}, {usr, "user cancel"}, {tmo, "timeout"}} {
		if r.won {
			winners++
			by = r.name + " won"
		}
	}
	d.tl.say(p.no, "race result: payment %s, user cancel %s, timeout %s → %s (%s)", pay.what, usr.what, tmo.what, o.Status, by)
	switch {
	case winners > 1:
		d.problem("race %s: %d callers were told they changed the order", p.no, winners)
	case o.Status == expiry.StatusPending:
		d.problem("race %s: still pending after the race", p.no)
	case pay.won && o.Status != expiry.StatusPaid, (usr.won || tmo.won) && o.Status != expiry.StatusCancelled:
		d.problem("race %s: the winner's change is not what the store has (%s)", p.no, o.Status)
	}
	d.mu.Lock()
	d.races++
	d.mu.Unlock()
}

// discrepancy: another user's cancel is refused, the owner cancels, then the
// payment arrives anyway (a discrepancy: the hook refunds); then the broker
// delivers the order's message twice and someone sends a hostile body.
func (d *demo) discrepancy(ctx context.Context, p *plan) {
	if !sleepUntil(ctx, p.placedAt.Add(400*time.Millisecond)) {
		return
	}
	if _, what := d.userCancel(ctx, p.no, visitor); what != "refused (not the owner)" {
		d.problem("%s: cancel by another user %s", p.no, what)
	} else {
		d.tl.say(p.no, "cancel by %s refused: not the owner (a service answers 404)", visitor)
	}
	if !sleepUntil(ctx, p.placedAt.Add(600*time.Millisecond)) {
		return
	}
	if won, what := d.userCancel(ctx, p.no, p.user); !won {
		d.problem("%s: the owner's cancel %s", p.no, what)
	}
	if !sleepUntil(ctx, p.placedAt.Add(1000*time.Millisecond)) {
		return
	}
	d.tl.say(p.no, "payment callback arrives after the cancel, then the provider repeats it (answered 409)")
	for range 2 { // the refund hook runs once: the discrepancy is recorded per payment id
		if _, what := d.pay(ctx, p.no, paymentID(p.no)); what != "lost (discrepancy)" {
			d.problem("%s: payment after cancel %s", p.no, what)
		}
	}
	if !sleepUntil(ctx, p.placedAt.Add(1200*time.Millisecond)) {
		return
	}
	d.tl.say(p.no, "the broker delivers hop 1 again (a duplicate)")
	body, err := expiry.EncodeMessage(expiry.Message{OrderNo: p.no, Hop: 1})
	if err != nil {
		d.problem("%s: encode message: %v", p.no, err)
		return
	}
	if v := d.shell.Process(ctx, expiry.Delivery{Body: body}); v != expiry.Ack {
		d.problem("%s: the duplicate delivery was not acknowledged (%v)", p.no, v)
	}
	d.tl.say("", "someone sends a hostile body %q", "oe1 a{b} 1")
	if v := d.shell.Process(ctx, expiry.Delivery{Body: []byte("oe1 a{b} 1")}); v != expiry.Ack {
		d.problem("the hostile body was not acknowledged (%v)", v)
	}
}

// rejections places three orders that must not exist afterwards: one asks
// for a seat another order holds, one for more seats than the purchase limit,
// one fails the host's own check inside the transaction (a rollback).
func (d *demo) rejections(ctx context.Context) {
	expiresAt := time.Now().Add(maxExpiry)
	for i := len(d.plans) - 1; i >= 0; i-- { // the latest placed: surely still pending
		p := d.plans[i]
		if p.kind == kindExpire || p.kind == kindRace || p.kind == kindLostMessage || p.kind == kindReleaseFails {
			pl := cancel.Placement{OrderNo: d.extras[0], UserID: visitor, ShowID: p.show, Seats: []string{d.take(p.show, 1)[0], p.seats[0]}, ExpireAt: expiresAt}
			err := d.place(ctx, pl, nil)
			d.expectRejected(pl.OrderNo, err, cancel.ErrSeatUnavailable, fmt.Sprintf("seat %s is held by %s (409)", p.seats[0], p.no))
			break
		}
	}
	show := d.shows[0]
	pl := cancel.Placement{OrderNo: d.extras[1], UserID: visitor, ShowID: show, Seats: d.take(show, purchaseLimit+1), ExpireAt: expiresAt}
	err := d.place(ctx, pl, nil)
	d.expectRejected(pl.OrderNo, err, cancel.ErrLimitExceeded, fmt.Sprintf("%d seats, the limit is %d (429)", len(pl.Seats), purchaseLimit))

	errCoupon := errors.New("coupon expired")
	pl = cancel.Placement{OrderNo: d.extras[2], UserID: visitor, ShowID: show, Seats: d.take(show, 2), ExpireAt: expiresAt}
	err = d.place(ctx, pl, func(context.Context, *sql.Tx) error { return errCoupon })
	if errors.Is(err, errCoupon) {
		d.mu.Lock()
		d.rolledBack++
		d.mu.Unlock()
		d.tl.say(pl.OrderNo, "rolled back after the insert (%v): no message sent, seats %s released", err, strings.Join(pl.Seats, ","))
	} else {
		d.problem("%s: want the rollback, got %v", pl.OrderNo, err)
	}
}

func (d *demo) expectRejected(no string, err, want error, why string) {
	if !errors.Is(err, want) {
		d.problem("%s: want %v, got %v", no, want, err)
		return
	}
	d.mu.Lock()
	d.rejected++
	d.mu.Unlock()
	d.tl.say(no, "rejected: %s", why)
}

// onDiscrepancy is the refund hook: it runs once per payment id the order
// could not take. A real one refunds x.PaymentID at the provider (keyed by it,
// so a retry after an error refunds once) and returns the provider's error.
func (d *demo) onDiscrepancy(_ context.Context, x cancel.Discrepancy) error {
	d.mu.Lock()
	d.discrepant = append(d.discrepant, discrepancy{x.OrderNo, x.PaymentID})
	d.mu.Unlock()
	d.tl.say(x.OrderNo, "DISCREPANCY: payment %s after the order was %s → hook: refund %s", x.PaymentID, x.Status, x.UserID)
	return nil
}

// waitSettled waits until every action is done and no order of the run is
// pending, printing progress; it gives up (false, and a violation) well after
// the last order plus a few reconcile rounds should have been decided.
func (d *demo) waitSettled(ctx context.Context, actionsDone <-chan struct{}) (bool, error) {
	deadline := time.Now().Add(maxExpiry + 3*reconcileEvery + 10*time.Second)
	lastProgress := time.Now()
	for {
		pending, err := d.countPending(ctx)
		if err != nil {
			return false, err
		}
		select {
		case <-actionsDone:
			if pending == 0 {
				return true, nil
			}
		default:
		}
		if time.Now().After(deadline) {
			d.problem("%d orders still pending %v after the last was placed", pending, maxExpiry+3*reconcileEvery+10*time.Second)
			return false, nil
		}
		if time.Since(lastProgress) >= 2*time.Second {
			lastProgress = time.Now()
			d.tl.say("", "… waiting: %d orders pending, %d messages in flight", pending, d.tr.inFlight())
		}
		if !sleepUntil(ctx, time.Now().Add(100*time.Millisecond)) {
			return false, fmt.Errorf("interrupted: %w", ctx.Err())
		}
	}
}

// sleepUntil waits until t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// lossySender loses the first message of some orders, as a broker (or a
// crash between commit and send) might: the Scheduler sees success and only
// the reconciler will cancel those orders. An injected fault.
type lossySender struct {
	expiry.DelaySender
	dropFirst map[string]bool // read-only
}

func (l lossySender) Send(ctx context.Context, m expiry.Message, delay time.Duration) error {
	if m.Hop == 1 && l.dropFirst[m.OrderNo] {
		return nil
	}
	return l.DelaySender.Send(ctx, m, delay)
}

// flakyReleaser is the seat store, but fails the first release of some
// orders, as a Redis outage would: the order is cancelled in SQL with its
// seats still locked, and the reconciler's seat scan frees them. An injected
// fault.
type flakyReleaser struct {
	cancel.SeatStore
	mu       sync.Mutex
	failOnce map[string]bool
}

func (f *flakyReleaser) Release(ctx context.Context, h cancel.Hold) (int, error) {
	f.mu.Lock()
	fail := f.failOnce[h.OrderNo]
	delete(f.failOnce, h.OrderNo)
	f.mu.Unlock()
	if fail {
		return 0, errors.New("injected fault: Redis unavailable")
	}
	return f.SeatStore.Release(ctx, h)
}

// ReleaseAll is Release for each hold (-1 for a failed one), so the fault
// hits the batch releases of the consumer and the reconciler too.
func (f *flakyReleaser) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	out := make([]int, len(holds))
	var errs []error
	for i, h := range holds {
		n, err := f.Release(ctx, h)
		if err != nil {
			out[i], errs = -1, append(errs, err)
			continue
		}
		out[i] = n
	}
	return out, errors.Join(errs...)
}
