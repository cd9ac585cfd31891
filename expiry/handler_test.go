package expiry_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
)

// recorder is a DelaySender and Observer that remembers what it saw.
type recorder struct {
	mu     sync.Mutex
	sent   []sent
	events []expiry.Event
	err    error
}

type sent struct {
	m     expiry.Message
	delay time.Duration
}

func (r *recorder) Send(_ context.Context, m expiry.Message, d time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	r.sent = append(r.sent, sent{m, d})
	return nil
}

func (r *recorder) Observe(_ context.Context, e expiry.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) count(k expiry.Kind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Kind == k {
			n++
		}
	}
	return n
}

type world struct {
	clock  *expirytest.FakeClock
	store  *memstore.Store
	seats  *memstore.Seats
	svc    *cancel.Service
	rec    *recorder
	h      *expiry.Handler
	userID string
}

func newWorld(t *testing.T) *world {
	w := &world{clock: expirytest.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)), rec: &recorder{}, userID: "u1"}
	w.store = memstore.NewStore(w.clock.Now)
	w.seats = memstore.NewSeats(w.clock.Now)
	var err error
	w.svc, err = cancel.New(cancel.Config{Store: w.store, Seats: w.seats, Runtime: expiry.Runtime{Observer: w.rec}})
	require.NoError(t, err)
	w.h, err = expiry.NewHandler(expiry.HandlerConfig{Canceller: w.svc, Sender: w.rec, Runtime: expiry.Runtime{Observer: w.rec}})
	require.NoError(t, err)
	return w
}

// place puts an order due in ttl, with its seats locked, as a host would.
func (w *world) place(t *testing.T, no string, ttl time.Duration) cancel.Placement {
	p := cancel.Placement{OrderNo: no, UserID: w.userID, ShowID: "show", Seats: []string{no + "-a", no + "-b"}, ExpireAt: w.clock.Now().Add(ttl)}
	_, err := w.seats.Lock(context.Background(), p.Hold(), 0)
	require.NoError(t, err)
	require.NoError(t, w.store.Place(context.Background(), p))
	return p
}

func (w *world) status(t *testing.T, no string) expiry.Status {
	o, err := w.store.Order(context.Background(), no)
	require.NoError(t, err)
	return o.Status
}

func (w *world) free(t *testing.T, p cancel.Placement) bool {
	show, err := w.seats.Show(context.Background(), p.ShowID)
	require.NoError(t, err)
	for _, s := range p.Seats {
		if _, taken := show[s]; taken {
			return false
		}
	}
	return true
}

// The four cases of a delivered message: paid, cancelled, pending and due, pending and not yet due.
func TestHandlerArticleCases(t *testing.T) {
	ctx := context.Background()

	t.Run("expired order is cancelled and its seats released", func(t *testing.T) {
		w := newWorld(t)
		p := w.place(t, "o1", time.Minute)
		w.clock.Advance(time.Minute)
		out, err := w.h.Handle(ctx, expiry.Message{OrderNo: "o1", Hop: 1})
		require.NoError(t, err)
		assert.Equal(t, expiry.OutcomeCancelled, out)
		assert.Equal(t, expiry.StatusCancelled, w.status(t, "o1"))
		assert.True(t, w.free(t, p), "seats are free again")
		held, _ := w.seats.Held(ctx, "show", w.userID)
		assert.Zero(t, held)
	})

	t.Run("paid order is ignored", func(t *testing.T) {
		w := newWorld(t)
		p := w.place(t, "o1", time.Minute)
		_, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: "o1", UserID: w.userID, PaymentID: "pay-1"})
		require.NoError(t, err)
		w.clock.Advance(2 * time.Minute)
		out, err := w.h.Handle(ctx, expiry.Message{OrderNo: "o1", Hop: 1})
		require.NoError(t, err)
		assert.Equal(t, expiry.OutcomeFinal, out)
		assert.Equal(t, expiry.StatusPaid, w.status(t, "o1"))
		assert.False(t, w.free(t, p), "sold seats stay sold")
		assert.Empty(t, w.rec.sent)
	})

	t.Run("not yet due is re-armed with the remaining time", func(t *testing.T) {
		w := newWorld(t)
		w.place(t, "o1", 15*time.Minute)
		w.clock.Advance(10 * time.Minute)
		out, err := w.h.Handle(ctx, expiry.Message{OrderNo: "o1", Hop: 1, TraceID: "tr"})
		require.NoError(t, err)
		assert.Equal(t, expiry.OutcomeRearmed, out)
		require.Len(t, w.rec.sent, 1)
		assert.Equal(t, 5*time.Minute, w.rec.sent[0].delay)
		assert.Equal(t, expiry.Message{OrderNo: "o1", Hop: 2, TraceID: "tr"}, w.rec.sent[0].m)
		assert.Equal(t, expiry.StatusPending, w.status(t, "o1"))
		assert.Equal(t, 1, w.rec.count(expiry.KindRearmed))
	})

	t.Run("the same order handled twice has no second effect", func(t *testing.T) {
		w := newWorld(t)
		w.place(t, "o1", time.Minute)
		w.clock.Advance(time.Minute)
		out, err := w.h.Handle(ctx, expiry.Message{OrderNo: "o1", Hop: 1})
		require.NoError(t, err)
		require.Equal(t, expiry.OutcomeCancelled, out)
		// Another order takes one of the freed seats: a second release of o1
		// must not touch it.
		q := cancel.Placement{OrderNo: "o2", UserID: "u2", ShowID: "show", Seats: []string{"o1-a"}, ExpireAt: w.clock.Now().Add(time.Hour)}
		_, err = w.seats.Lock(ctx, q.Hold(), 0)
		require.NoError(t, err)
		out, err = w.h.Handle(ctx, expiry.Message{OrderNo: "o1", Hop: 1})
		require.NoError(t, err)
		assert.Equal(t, expiry.OutcomeFinal, out)
		show, _ := w.seats.Show(ctx, "show")
		assert.Equal(t, "o2", show["o1-a"].OrderNo, "I2: the seat now locked by o2 stays o2's")
		assert.Equal(t, 1, w.rec.count(expiry.KindCancelled), "I5: one cancel")
	})
}

// stubCanceller scripts the store's answers, including ones a real store
// gives only under races.
type stubCanceller struct {
	cancelled bool
	order     expiry.Order
	err       error
	calls     int
	trace     string
}

func (s *stubCanceller) Timeout(ctx context.Context, _ string) (bool, expiry.Order, error) {
	s.calls++
	s.trace = expiry.TraceID(ctx)
	return s.cancelled, s.order, s.err
}

func TestHandlerBranches(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pending := func(left time.Duration) expiry.Order {
		return expiry.Order{No: "o1", Status: expiry.StatusPending, ExpireAt: now.Add(left), ReadAt: now}
	}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name      string
		canceller stubCanceller
		sendErr   error
		want      expiry.Outcome
		wantErr   bool
		wantSent  time.Duration // 0: nothing sent
	}{
		{name: "missing", canceller: stubCanceller{err: fmt.Errorf("x: %w", expiry.ErrNotFound)}, want: expiry.OutcomeMissing},
		{name: "store down", canceller: stubCanceller{err: boom}, want: expiry.OutcomeFailed, wantErr: true},
		{name: "cancelled", canceller: stubCanceller{cancelled: true, order: expiry.Order{No: "o1", Status: expiry.StatusCancelled}}, want: expiry.OutcomeCancelled},
		{name: "already cancelled", canceller: stubCanceller{order: expiry.Order{No: "o1", Status: expiry.StatusCancelled}}, want: expiry.OutcomeFinal},
		{name: "paid first", canceller: stubCanceller{order: expiry.Order{No: "o1", Status: expiry.StatusPaid}}, want: expiry.OutcomeFinal},
		{name: "not due", canceller: stubCanceller{order: pending(3 * time.Second)}, want: expiry.OutcomeRearmed, wantSent: 3 * time.Second},
		{name: "re-arm send fails", canceller: stubCanceller{order: pending(time.Second)}, sendErr: boom, want: expiry.OutcomeFailed, wantErr: true},
		{name: "boundary never spins", canceller: stubCanceller{order: pending(0)}, want: expiry.OutcomeRearmed, wantSent: 100 * time.Millisecond},
		{name: "no deadline is final", canceller: stubCanceller{order: expiry.Order{No: "o1", Status: expiry.StatusPending, ReadAt: time.Now()}}, want: expiry.OutcomeFinal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{err: tc.sendErr}
			canc := tc.canceller
			h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: &canc, Sender: rec, Runtime: expiry.Runtime{Observer: rec}})
			require.NoError(t, err)
			out, err := h.Handle(context.Background(), expiry.Message{OrderNo: "o1", Hop: 4})
			assert.Equal(t, tc.want, out)
			assert.Equal(t, tc.wantErr, err != nil, "err = %v", err)
			assert.Equal(t, 1, canc.calls, "one call to the store")
			if tc.wantSent > 0 {
				require.Len(t, rec.sent, 1)
				assert.Equal(t, tc.wantSent, rec.sent[0].delay)
				assert.Equal(t, 5, rec.sent[0].m.Hop)
			} else {
				assert.Empty(t, rec.sent)
			}
			if tc.sendErr != nil {
				assert.Equal(t, 1, rec.count(expiry.KindSendFailed))
			}
		})
	}
}

func TestHandlerInvalidOrderNumber(t *testing.T) {
	canc := &stubCanceller{err: errors.New("must not be called")}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: canc, Sender: &recorder{}})
	require.NoError(t, err)
	out, err := h.Handle(context.Background(), expiry.Message{OrderNo: "a{b}", Hop: 1})
	assert.NoError(t, err, "not a transient failure: redelivery cannot help")
	assert.Equal(t, expiry.OutcomeMissing, out)
	assert.Zero(t, canc.calls)
}

func TestNewHandlerRequiresDependencies(t *testing.T) {
	for _, c := range []expiry.HandlerConfig{
		{Sender: &recorder{}},
		{Canceller: &stubCanceller{}},
	} {
		_, err := expiry.NewHandler(c)
		assert.Error(t, err)
	}
}

func TestOutcomeAndKindNames(t *testing.T) {
	assert.Equal(t, "rearmed", expiry.OutcomeRearmed.String())
	assert.Equal(t, "unknown", expiry.Outcome(99).String())
	assert.Equal(t, "bad_message", expiry.KindBadMessage.String())
	assert.Equal(t, "unknown", expiry.Kind(0).String())
	assert.Equal(t, "cancelled", expiry.StatusCancelled.String())
	assert.Equal(t, "status(7)", expiry.Status(7).String())
}

type zeroCanceller struct{}

func (zeroCanceller) Timeout(context.Context, string) (bool, expiry.Order, error) {
	return false, expiry.Order{}, nil
}

// A Canceller that answers with a zero Order (not a pending order it read)
// is broken: the handler must report it, not re-arm the message every 100 ms
// for ever.
func TestHandlerZeroOrderIsAnError(t *testing.T) {
	rec := &recorder{}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: zeroCanceller{}, Sender: rec})
	require.NoError(t, err)
	out, err := h.Handle(context.Background(), expiry.Message{OrderNo: "o1", Hop: 1})
	assert.Error(t, err)
	assert.NotEqual(t, expiry.OutcomeRearmed, out)
	assert.Empty(t, rec.sent, "nothing re-armed")
}

type fixedWarner struct {
	res expiry.WarnResult
	err error
}

func (w fixedWarner) Warn(context.Context, string, time.Duration) (expiry.WarnResult, error) {
	return w.res, w.err
}

// A warning message goes to the Warner, never to the cancel; each of the
// Warner's answers maps to one outcome, and only an early one re-arms, as a
// warning, for the time left minus the lead.
func TestHandlerWarning(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	msg := expiry.Message{OrderNo: "o1", Hop: 1, Warning: true, Lead: time.Minute}
	pending := func(left time.Duration) expiry.Order {
		return expiry.Order{No: "o1", Status: expiry.StatusPending, ExpireAt: now.Add(left), ReadAt: now}
	}
	for name, tc := range map[string]struct {
		w       fixedWarner
		want    expiry.Outcome
		rearmed time.Duration
	}{
		"fired":       {fixedWarner{res: expiry.WarnResult{Fired: true, Order: pending(time.Minute)}}, expiry.OutcomeWarned, 0},
		"redelivered": {fixedWarner{res: expiry.WarnResult{Warned: true, Order: pending(time.Minute)}}, expiry.OutcomeFinal, 0},
		"paid":        {fixedWarner{res: expiry.WarnResult{Order: expiry.Order{No: "o1", Status: expiry.StatusPaid}}}, expiry.OutcomeFinal, 0},
		"due":         {fixedWarner{res: expiry.WarnResult{Order: pending(-time.Second)}}, expiry.OutcomeFinal, 0},
		// A store whose compare-and-set never fires inside the window: tried
		// twice, then dropped, not re-armed every 100 ms until the deadline.
		"never fires": {fixedWarner{res: expiry.WarnResult{Order: pending(30 * time.Second)}}, expiry.OutcomeFinal, 0},
		"early":       {fixedWarner{res: expiry.WarnResult{Order: pending(10 * time.Minute)}}, expiry.OutcomeRearmed, 9 * time.Minute},
		// Pending without a deadline (a host's NULL deadline): nothing to
		// warn of, ever; not a re-arm for the time a zero deadline seems to
		// have left.
		"no deadline": {fixedWarner{res: expiry.WarnResult{Order: expiry.Order{No: "o1", Status: expiry.StatusPending, ReadAt: now}}}, expiry.OutcomeFinal, 0},
		"missing":     {fixedWarner{err: expiry.ErrNotFound}, expiry.OutcomeMissing, 0},
		"down":        {fixedWarner{err: errors.New("db down")}, expiry.OutcomeFailed, 0},
		"zero order":  {fixedWarner{}, expiry.OutcomeFailed, 0},
	} {
		t.Run(name, func(t *testing.T) {
			rec := &recorder{}
			h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: zeroCanceller{}, Warner: tc.w, Sender: rec})
			require.NoError(t, err)
			out, err := h.Handle(ctx, msg)
			assert.Equal(t, tc.want, out)
			assert.Equal(t, tc.want == expiry.OutcomeFailed, err != nil, "%v", err)
			if tc.rearmed == 0 {
				assert.Empty(t, rec.sent)
				return
			}
			require.Len(t, rec.sent, 1)
			assert.Equal(t, tc.rearmed, rec.sent[0].delay)
			assert.Equal(t, expiry.Message{OrderNo: "o1", Hop: 2, Warning: true, Lead: time.Minute}, rec.sent[0].m)
		})
	}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: zeroCanceller{}, Sender: &recorder{}})
	require.NoError(t, err)
	out, err := h.Handle(ctx, msg)
	require.NoError(t, err)
	assert.Equal(t, expiry.OutcomeFinal, out, "no Warner: a warning is dropped")
	assert.Equal(t, "warned", expiry.OutcomeWarned.String())
	assert.Equal(t, "reinstated", expiry.KindReinstated.String())
	assert.Equal(t, "warned", expiry.KindWarned.String())
	assert.Equal(t, "deadline_changed", expiry.KindDeadlineChanged.String())
}

// windowWarner is a store whose Warn, like sqlstore's, is two statements
// reading the store's clock one after the other: the compare-and-set, then
// the read of the order it answers with. Its clock moves 2 ms between them
// and by each re-arm's delay between deliveries.
type windowWarner struct {
	now, expire time.Time
	fired       int
}

func (w *windowWarner) Warn(_ context.Context, no string, lead time.Duration) (expiry.WarnResult, error) {
	cas := w.now
	w.now = w.now.Add(2 * time.Millisecond)
	o := expiry.Order{No: no, Status: expiry.StatusPending, ExpireAt: w.expire, ReadAt: w.now}
	if w.fired == 0 && w.expire.After(cas) && !w.expire.After(cas.Add(lead)) {
		w.fired++
		return expiry.WarnResult{Fired: true, Order: o}, nil
	}
	return expiry.WarnResult{Warned: w.fired > 0, Order: o}, nil
}

// A warning delivered as its window opens, the compare-and-set a
// millisecond before the window and the read of the order after it, is
// fired on that delivery, never dropped as if the order were due: the order
// is pending with most of the lead left. (Found by the
// model on a corpus schema: a warning answered OutcomeFinal with 349 ms of a
// 350 ms lead left.)
func TestWarningAtTheWindowsEdgeFires(t *testing.T) {
	ctx := context.Background()
	lead := 5 * time.Minute
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &windowWarner{now: start, expire: start.Add(lead + time.Millisecond)}
	rec := &recorder{}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: zeroCanceller{}, Warner: w, Sender: rec})
	require.NoError(t, err)
	queue := []sent{{m: expiry.Message{OrderNo: "o1", Hop: 1, Warning: true, Lead: lead}}}
	for i := 0; len(queue) > 0 && i < 10; i++ {
		next := queue[0]
		queue = queue[1:]
		w.now = w.now.Add(next.delay)
		rec.sent = nil
		_, err := h.Handle(ctx, next.m)
		require.NoError(t, err)
		queue = append(queue, rec.sent...)
	}
	assert.Equal(t, 1, w.fired, "the warning fired once")
	assert.True(t, w.now.Before(w.expire), "before the deadline")
}

func TestSchedulerSendsWarningFirst(t *testing.T) {
	rec := &recorder{}
	clock := expirytest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: rec, Runtime: expiry.Runtime{Clock: clock}, WarnBefore: 2 * time.Minute})
	require.NoError(t, err)
	require.True(t, s.Schedule(context.Background(), "o1", clock.Now().Add(15*time.Minute)))
	require.Len(t, rec.sent, 2)
	assert.Equal(t, sent{expiry.Message{OrderNo: "o1", Hop: 1, Warning: true, Lead: 2 * time.Minute}, 13 * time.Minute}, rec.sent[0])
	assert.Equal(t, sent{expiry.Message{OrderNo: "o1", Hop: 1}, 15 * time.Minute}, rec.sent[1])
	require.True(t, s.Schedule(context.Background(), "o2", clock.Now().Add(time.Minute)))
	assert.Equal(t, time.Duration(0), rec.sent[2].delay, "less time than the lead: warned at once")
	for _, bad := range []time.Duration{-time.Second, time.Microsecond, expiry.MaxWarnLead + time.Millisecond} {
		_, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: rec, WarnBefore: bad})
		assert.Error(t, err, "%v", bad)
	}
}
