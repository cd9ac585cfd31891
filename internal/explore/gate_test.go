package explore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// This file is the gate: every call the library (or the host code of an
// operation) makes to a store goes through a wrapper that lets the explorer
// decide when it happens. An operation runs in its own goroutine and stops
// before each gated call (a commit point) until the explorer tells it to
// go on, to fail that call, or to die there. Reads are not gated: they run
// right after the gated call before them, so a stopped operation holds the
// stalest view it can have when it goes on.

// errKilled is what every call of a killed operation returns: its process
// died, or gave up after a lost reply, and nothing it does after takes
// effect.
var errKilled = errors.New("explore: operation killed")

// errInjected is the failure a gated call is told to return (a seat store
// that did not answer): nothing was changed.
var errInjected = errors.New("explore: injected failure")

type opKey struct{}

// opOf is the operation ctx carries (nil: none).
func opOf(ctx context.Context) *op {
	o, _ := ctx.Value(opKey{}).(*op)
	return o
}

// command is what the explorer tells an operation stopped at a gate.
type command int

const (
	cmdExec command = iota // make the call
	cmdFail                // the call fails without changing anything
	cmdKill                // the operation dies before the call
)

// op is one operation in flight: a goroutine running one catalog entry.
type op struct {
	id      int
	kind    int
	name    string
	tenant  int
	started time.Time // the fake clock when it started
	step    int       // the world's step that started it
	round   bool      // a reconcile round
	resume  chan command
	// trace is every store call the operation made, with its answer: the
	// operation's local state is a function of it (the code is
	// deterministic), so it goes into the state hash of a stopped operation.
	trace []call
	// at is the gated call it is stopped before, while it is stopped.
	at   string
	dead bool
	auto bool // run to completion without stopping (settle)
	// free: run to completion without stopping, in a replay's step
	// (world.fast); unlike auto, the operation is the step's.
	free bool
	// atomic is set while the operation is inside ReinstateCancelled.
	atomic bool
	// active is set by a reconcile round that did something.
	active bool
	// grants are the payments (payment.key) the discrepancy store gave
	// this operation to refund (world.granted).
	grants map[string]grant
	// text is trace's calls joined, as of its first textLen calls.
	text    string
	textLen int
	// touched are the seat-store calls the gate passes through without a
	// gate and without a trace (Refunded, MarkRefunded, SeatStates,
	// ScanSold: gatedSeats.touch), for the footprint only.
	touched []string
}

// traceText is the operation's calls so far, joined.
func (o *op) traceText() string {
	if o.textLen != len(o.trace) {
		var b strings.Builder
		for i, c := range o.trace {
			if i > 0 {
				b.WriteByte(';')
			}
			b.WriteString(c.text)
		}
		o.text, o.textLen = b.String(), len(o.trace)
	}
	return o.text
}

// call is one store call of an operation.
type call struct {
	gated bool
	text  string
}

// event is what an operation tells the explorer: it stopped at a gate, or
// it finished.
type event struct {
	op   *op
	done bool
	at   string
}

// do runs one store call of the operation carried by ctx (if any) through
// the gate. exec makes the call and summarises its answer (no absolute
// times: the summary goes into the state hash). Calls outside any operation
// (the explorer's own observations) run at once.
func (w *world) do(ctx context.Context, name, args string, gated bool, exec func() (string, error)) error {
	o, _ := ctx.Value(opKey{}).(*op)
	if o == nil {
		_, err := exec()
		return err
	}
	if o.dead {
		return errKilled
	}
	// The seat lock a reinstatement claims runs inside its transaction
	// (the claim callback): it is part of that gated call, no gate of its
	// own.
	inside := o.atomic && name == "Lock"
	if gated && !inside {
		o.atomic = false
		if err := w.stop(o, name+"("+args+")"); err != nil {
			if err == errInjected {
				w.note(o, gated, name, args, "injected failure")
			}
			return err
		}
	}
	res, err := exec()
	if err != nil {
		res = errSummary(err)
	}
	w.note(o, gated, name, args, res)
	return err
}

// stop stops o before the gated call at until the explorer says what to
// do: nil to make the call, errKilled (o dies) or errInjected (the call
// fails) not to. Operations running to completion (auto) do not stop.
func (w *world) stop(o *op, at string) error {
	if o.auto || o.free {
		return nil
	}
	w.events <- event{op: o, at: at}
	switch <-o.resume {
	case cmdKill:
		o.dead = true
		return errKilled
	case cmdFail:
		return errInjected
	}
	return nil
}

func (w *world) note(o *op, gated bool, name, args, res string) {
	text := name + "(" + args + ")=" + res
	o.trace = append(o.trace, call{gated: gated, text: text})
	w.fingerprint(text)
}

// errSummary names the library's sentinel an error wraps, so that traces
// do not depend on message wording.
func errSummary(err error) string {
	for _, s := range []struct {
		err  error
		name string
	}{
		{errKilled, "killed"}, {errInjected, "injected"}, {cancel.ErrSeatUnavailable, "ErrSeatUnavailable"},
		{cancel.ErrLimitExceeded, "ErrLimitExceeded"}, {cancel.ErrOrderExists, "ErrOrderExists"},
		{cancel.ErrDiscrepancy, "ErrDiscrepancy"}, {cancel.ErrNotOwner, "ErrNotOwner"},
		{cancel.ErrNoSeatRecord, "ErrNoSeatRecord"}, {cancel.ErrUnsupported, "ErrUnsupported"},
		{expiry.ErrNotFound, "ErrNotFound"}, {expiry.ErrCommitUnknown, "ErrCommitUnknown"},
		{expiry.ErrInvalidID, "ErrInvalidID"}, {context.DeadlineExceeded, "DeadlineExceeded"},
	} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return "error"
}

func holdArgs(h cancel.Hold) string {
	return h.OrderNo + " " + h.ShowID + ":" + strings.Join(h.Seats, ",") + lockID(h.ShowID, h)
}

func resultSummary(r cancel.Result) string {
	s := r.Order.Status.String()
	if r.Changed {
		s = "changed→" + s
	}
	if len(r.Seats) > 0 {
		s += " seats " + strings.Join(r.Seats, ",")
	}
	if r.PaymentID != "" {
		s += " by " + r.PaymentID
	}
	return s
}

// gatedStore is a tenant's order store (memstore.Store standing in for
// sqlstore, or sqlstore itself in a replay) behind the gate. It embeds the
// store as an orderStore, which holds every interface the library uses or
// type-asserts (cancel.OrderStore, DiscrepancyStore, Reinstater,
// DeadlineStore, WarnStore, cancel.OrderStore), and overrides the calls it
// gates or records. TestGatesCoverEveryMethod keeps the lists complete.
type gatedStore struct {
	orderStore
	w *world
	t *tenant
}

// Scope is the tenant's: each tenant's order store serves its own rows, as
// a sqlstore.Store with a Mapping's Where (its Scope) does. (Each tenant
// has a store of its own: see newWorld.)
func (g *gatedStore) Scope() string { return g.t.scope() }

var _ cancel.OrderStore = (*gatedStore)(nil)

func (g *gatedStore) Order(ctx context.Context, no string) (expiry.Order, error) {
	var o expiry.Order
	err := g.w.do(ctx, "Order", no, false, func() (string, error) {
		var err error
		o, err = g.orderStore.Order(ctx, no)
		return o.Status.String(), err
	})
	return o, err
}

func (g *gatedStore) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	var res cancel.Result
	err := g.w.do(ctx, "CancelPending", req.OrderNo+" "+string(req.Reason), true, func() (string, error) {
		var err error
		res, err = g.orderStore.CancelPending(ctx, req)
		if err == nil && res.Changed {
			g.w.cancelled(g.t, req.OrderNo, req.Reason)
		}
		g.w.roundTried(ctx, g.t, err, req.OrderNo)
		return resultSummary(res), err
	})
	return res, err
}

// CancelDue is one gated call: a batch commits every order it expires at
// once, and a stop after it, before the releases the Service runs next, is
// a crash between a batch's commit and its releases.
func (g *gatedStore) CancelDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	var res []cancel.Result
	err := g.w.do(ctx, "CancelDue", strings.Join(nos, ",")+" "+string(reason), true, func() (string, error) {
		var err error
		res, err = g.orderStore.CancelDue(ctx, nos, reason)
		g.w.roundTried(ctx, g.t, err, nos...)
		var out []string
		for _, r := range res {
			g.w.cancelled(g.t, r.Order.No, reason)
			out = append(out, r.Order.No+" "+resultSummary(r))
		}
		return strings.Join(out, "; "), err
	})
	return res, err
}

// ReinstateCancelled is one gated call: the seat lock its claim callback
// takes runs inside the store's transaction, so it has no gate of its own
// (see world.do).
func (g *gatedStore) ReinstateCancelled(ctx context.Context, p cancel.Payment, claim func(ctx context.Context, h cancel.Hold, limit int) (string, error)) (cancel.Result, error) {
	var res cancel.Result
	err := g.w.do(ctx, "ReinstateCancelled", p.OrderNo+" "+p.PaymentID, true, func() (string, error) {
		o, _ := ctx.Value(opKey{}).(*op)
		if o != nil {
			o.atomic = true
			defer func() { o.atomic = false }()
		}
		var err error
		res, err = g.orderStore.ReinstateCancelled(ctx, p, claim)
		return resultSummary(res), err
	})
	return res, err
}

func (g *gatedStore) PayPending(ctx context.Context, p cancel.Payment) (cancel.Result, error) {
	var res cancel.Result
	err := g.w.do(ctx, "PayPending", p.OrderNo+" "+p.PaymentID, true, func() (string, error) {
		var err error
		res, err = g.orderStore.PayPending(ctx, p)
		return resultSummary(res), err
	})
	return res, err
}

func (g *gatedStore) RecordDiscrepancy(ctx context.Context, d cancel.Discrepancy) (bool, error) {
	var recorded bool
	err := g.w.do(ctx, "RecordDiscrepancy", d.OrderNo+" "+d.PaymentID, true, func() (string, error) {
		var err error
		recorded, err = g.orderStore.RecordDiscrepancy(ctx, d)
		if err == nil && recorded {
			g.w.tried(g.t, d.PaymentID)
			g.w.granted(opOf(ctx), g.t, d.PaymentID)
		}
		return fmt.Sprint(recorded), err
	})
	return recorded, err
}

// ClaimDiscrepancies is not gated: it only moves a lease, and it runs with
// the gated call before it (the reconciler's last act of a round).
func (g *gatedStore) ClaimDiscrepancies(ctx context.Context, lease time.Duration, limit int) ([]cancel.Discrepancy, error) {
	var ds []cancel.Discrepancy
	err := g.w.do(ctx, "ClaimDiscrepancies", "", false, func() (string, error) {
		var err error
		ds, err = g.orderStore.ClaimDiscrepancies(ctx, lease, limit)
		var ids []string
		for _, d := range ds {
			g.w.tried(g.t, d.PaymentID)
			g.w.granted(opOf(ctx), g.t, d.PaymentID)
			ids = append(ids, d.PaymentID)
		}
		return strings.Join(ids, ","), err
	})
	return ds, err
}

// SettleDiscrepancy is not gated: it follows the refund hook's gate, and a
// crash between the two only calls the hook again (at least once, keyed by
// the payment id at the provider).
func (g *gatedStore) SettleDiscrepancy(ctx context.Context, paymentID string) error {
	return g.w.do(ctx, "SettleDiscrepancy", paymentID, false, func() (string, error) {
		err := g.orderStore.SettleDiscrepancy(ctx, paymentID)
		if err == nil {
			g.w.settled(g.t, paymentID)
		}
		return "ok", err
	})
}

func (g *gatedStore) SetDeadline(ctx context.Context, c cancel.DeadlineChange) (cancel.DeadlineResult, error) {
	var res cancel.DeadlineResult
	err := g.w.do(ctx, "SetDeadline", fmt.Sprintf("%s %v shorten=%v", c.OrderNo, c.In, c.Shorten), true, func() (string, error) {
		var err error
		res, err = g.orderStore.SetDeadline(ctx, c)
		return fmt.Sprint(res.Changed), err
	})
	return res, err
}

func (g *gatedStore) MarkWarned(ctx context.Context, orderNo string, lead time.Duration) (expiry.WarnResult, error) {
	var res expiry.WarnResult
	err := g.w.do(ctx, "MarkWarned", orderNo, true, func() (string, error) {
		var err error
		res, err = g.orderStore.MarkWarned(ctx, orderNo, lead)
		return fmt.Sprint(res.Fired), err
	})
	return res, err
}

func (g *gatedStore) Expired(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	var (
		nos  []string
		next string
	)
	err := g.w.do(ctx, "Expired", "", false, func() (string, error) {
		var err error
		nos, next, err = g.orderStore.Expired(ctx, cursor, limit)
		return strings.Join(nos, ","), err
	})
	return nos, next, err
}

func (g *gatedStore) Statuses(ctx context.Context, nos []string) (map[string]cancel.OrderState, error) {
	var st map[string]cancel.OrderState
	err := g.w.do(ctx, "Statuses", strings.Join(nos, ","), false, func() (string, error) {
		var err error
		st, err = g.orderStore.Statuses(ctx, nos)
		var parts []string
		for _, no := range slices.Sorted(maps.Keys(st)) {
			parts = append(parts, no+":"+st[no].Status.String()+"/"+g.w.bucket(st[no].Age, reconcile.SettleDefault))
		}
		return strings.Join(parts, ","), err
	})
	return st, err
}

func (g *gatedStore) Claims(ctx context.Context, cursor string, limit int) ([]cancel.Claim, string, error) {
	var (
		cs   []cancel.Claim
		next string
	)
	err := g.w.do(ctx, "Claims", "", false, func() (string, error) {
		var err error
		cs, next, err = g.orderStore.Claims(ctx, cursor, limit)
		return claimsSummary(cs), err
	})
	return cs, next, err
}

func claimsSummary(cs []cancel.Claim) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, c.ShowID+":"+c.SeatID+"="+c.OrderNo+"/"+c.UserID+"/"+c.Status.String())
	}
	return strings.Join(parts, ",")
}

// gatedSeats is a tenant's view of the seat store (memstore.Seats standing
// in for redisseat, or redisseat itself in a replay) behind the gate:
// cancel.SeatStore and cancel.SeatStore.
// Its writes also check scope: a call through one tenant's wiring that
// changes another tenant's show is a finding (I16).
type gatedSeats struct {
	seatStore
	w *world
	t *tenant
}

// Scope is the seat store's, which the library checks against the order
// store's at startup.
func (s *gatedSeats) Scope() string { return s.seatStore.Scope() }

var (
	_ cancel.SeatStore = (*gatedSeats)(nil)
	_ cancel.SeatStore = (*gatedSeats)(nil)
)

// write runs a seat-store write, comparing every other tenant's show before
// and after it.
func (s *gatedSeats) write(ctx context.Context, name, args string, exec func() (string, error)) error {
	return s.w.do(ctx, name, args, true, func() (string, error) {
		before := s.w.otherShows(s.t)
		res, err := exec()
		if after := s.w.otherShows(s.t); !maps.EqualFunc(before, after, maps.Equal) {
			for show := range after {
				if !maps.Equal(before[show], after[show]) {
					s.w.finding("I16", fmt.Sprintf("tenant %d's %s changed tenant %s's seats (%s: %s → %s)",
						s.t.n, name, s.w.tenantOf(show), show, seatsText(before[show]), seatsText(after[show])),
						fmt.Sprintf("tenant %d's %s changed another tenant's seats", s.t.n, name))
				}
			}
		}
		return res, err
	})
}

func (s *gatedSeats) Lock(ctx context.Context, h cancel.Hold, limit int) (string, error) {
	var id string
	err := s.write(ctx, "Lock", holdArgs(h), func() (string, error) {
		var err error
		id, err = s.seatStore.Lock(ctx, h, limit)
		return "ok", err // not the id: it holds the clock, and summaries are hashed
	})
	return id, err
}

func (s *gatedSeats) Release(ctx context.Context, h cancel.Hold) (int, error) {
	var n int
	err := s.write(ctx, "Release", holdArgs(h), func() (string, error) {
		var err error
		n, err = s.seatStore.Release(ctx, h)
		return fmt.Sprint(n), err
	})
	return n, err
}

// ReleaseAll is one gated step: one seat-store call (one atomic step per
// show), as a batch of cancels makes it.
func (s *gatedSeats) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	var ns []int
	args := make([]string, len(holds))
	for i, h := range holds {
		args[i] = holdArgs(h)
	}
	err := s.write(ctx, "ReleaseAll", strings.Join(args, "; "), func() (string, error) {
		var err error
		ns, err = s.seatStore.ReleaseAll(ctx, holds)
		return fmt.Sprint(ns), err
	})
	return ns, err
}

func (s *gatedSeats) Sell(ctx context.Context, h cancel.Hold) (int, error) {
	var n int
	err := s.write(ctx, "Sell", holdArgs(h), func() (string, error) {
		var err error
		n, err = s.seatStore.Sell(ctx, h)
		return fmt.Sprint(n), err
	})
	return n, err
}

func (s *gatedSeats) Restore(ctx context.Context, claims []cancel.Claim) (int, error) {
	var n int
	err := s.write(ctx, "Restore", claimsSummary(claims), func() (string, error) {
		var err error
		n, err = s.seatStore.Restore(ctx, claims)
		return fmt.Sprint(n), err
	})
	return n, err
}

func (s *gatedSeats) MarkRestored(ctx context.Context, token string) error {
	return s.write(ctx, "MarkRestored", "", func() (string, error) {
		return "ok", s.seatStore.MarkRestored(ctx, token)
	})
}

// touch notes a seat-store call of the operation ctx carries that the gate
// lets through as main's explorer always did (no stop before it, nothing in
// the trace, so neither the state hash nor the steps tried change), so that
// the step's footprint (por_test.go) sees what it read or wrote: without
// it, a step that read or marked a refund, or read the sold seats, would
// look independent of the steps that change them.
func (s *gatedSeats) touch(ctx context.Context, name, args string) {
	if o := opOf(ctx); o != nil {
		o.touched = append(o.touched, name+"("+args+")=")
	}
}

// Refunded reads the seat store's refund record of a payment id (Pay, and
// the refund hook's caller before it calls the hook).
func (s *gatedSeats) Refunded(ctx context.Context, paymentID string) (bool, error) {
	s.touch(ctx, "Refunded", paymentID)
	return s.seatStore.Refunded(ctx, paymentID)
}

// MarkRefunded writes the record, right after the refund hook succeeded
// (in the step of the gated Refund call).
func (s *gatedSeats) MarkRefunded(ctx context.Context, paymentID, orderNo string) error {
	s.touch(ctx, "MarkRefunded", orderNo+" "+paymentID)
	return s.seatStore.MarkRefunded(ctx, paymentID, orderNo)
}

// SeatStates reads seats a sale skipped (Pay, after Sell).
func (s *gatedSeats) SeatStates(ctx context.Context, show string, seats []string) (map[string]cancel.SeatState, error) {
	s.touch(ctx, "SeatStates", show+":"+strings.Join(seats, ","))
	return s.seatStore.SeatStates(ctx, show, seats)
}

// ScanSold reads the sold seats of every show (the reconciler's sold pass).
func (s *gatedSeats) ScanSold(ctx context.Context, cursor string, count int) ([]cancel.SeatSale, string, error) {
	s.touch(ctx, "ScanSold", "")
	return s.seatStore.ScanSold(ctx, cursor, count)
}

func (s *gatedSeats) ScanLocks(ctx context.Context, cursor string, count int) ([]cancel.SeatLock, string, error) {
	var (
		locks []cancel.SeatLock
		next  string
	)
	err := s.w.do(ctx, "ScanLocks", "", false, func() (string, error) {
		var err error
		locks, next, err = s.seatStore.ScanLocks(ctx, cursor, count)
		var parts []string
		for _, l := range locks {
			parts = append(parts, l.ShowID+":"+l.SeatID+"="+l.OrderNo+lockID(l.ShowID, l)+"/"+s.w.bucket(l.Age, reconcile.GraceDefault))
		}
		return strings.Join(parts, ","), err
	})
	return locks, next, err
}

func (s *gatedSeats) Lost(ctx context.Context) (string, bool, error) {
	var (
		token string
		lost  bool
	)
	err := s.w.do(ctx, "Lost", "", false, func() (string, error) {
		var err error
		token, lost, err = s.seatStore.Lost(ctx)
		return fmt.Sprint(lost), err
	})
	return token, lost, err
}

func (s *gatedSeats) Missing(ctx context.Context, claims []cancel.Claim) ([]cancel.Claim, error) {
	var out []cancel.Claim
	err := s.w.do(ctx, "Missing", "", false, func() (string, error) {
		var err error
		out, err = s.seatStore.Missing(ctx, claims)
		return claimsSummary(out), err
	})
	return out, err
}

// gatedSender is the expiry messages' transport: it only records that an
// order has a message (the timeout step is then enabled for it). Delivery
// is the explorer's choice: at least once, at any time, early ones re-armed
// by the library.
type gatedSender struct {
	w *world
	t *tenant
}

func (s gatedSender) Send(ctx context.Context, m expiry.Message, _ time.Duration) error {
	return s.w.do(ctx, "Send", m.OrderNo, true, func() (string, error) {
		if !m.Warning {
			s.w.sent(s.t, m.OrderNo)
		}
		return "sent", nil
	})
}

// refund is tenant t's refund hook (cancel.Config.OnDiscrepancy): its
// provider account refunds, keyed by payment id.
func (w *world) refund(t *tenant) func(ctx context.Context, d cancel.Discrepancy) error {
	return func(ctx context.Context, d cancel.Discrepancy) error {
		return w.do(ctx, "Refund", d.OrderNo+" "+d.PaymentID, true, func() (string, error) {
			w.refunded(opOf(ctx), t, d.PaymentID)
			return "refunded", nil
		})
	}
}
