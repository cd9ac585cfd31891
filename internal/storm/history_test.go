package storm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// op is one operation of a hand-written history: [call, ret] in ms.
type op struct {
	kind      OpKind
	actor     string
	call, ret int64
	out       Output
}

var (
	changed   = Output{Res: ResChanged}
	sawPaid   = Output{Res: ResSaw, Status: expiry.StatusPaid}
	sawCanc   = Output{Res: ResSaw, Status: expiry.StatusCancelled}
	sawPend   = Output{Res: ResSaw, Status: expiry.StatusPending}
	sawFinal  = Output{Res: ResSawFinal}
	notOwner  = Output{Res: ResNotOwner}
	unknown   = Output{Res: ResUnknown, Err: "timeout"}
	noChange  = Output{Res: ResNoChange}
	missing   = Output{Res: ResMissing}
	ownerName = "alice"
)

func history(order string, ops ...op) *History {
	h := NewHistory()
	for _, o := range ops {
		h.Add(Input{Order: order, Kind: o.kind, Owner: ownerName, Actor: o.actor}, o.call*int64(time.Millisecond), o.out, o.ret*int64(time.Millisecond))
	}
	return h
}

func TestHistoryCheck(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
		ops  []op
	}{
		{"payment wins, the rest see it", true, []op{
			{OpPay, ownerName, 0, 10, changed},
			{OpHandle, "", 5, 20, sawFinal},
			{OpUserCancel, ownerName, 12, 15, sawPaid},
			{OpPay, "", 16, 18, sawPaid}, // a repeated callback
			{OpRead, "", 30, 31, sawPaid},
		}},
		{"concurrent: the timeout wins although the payment started first", true, []op{
			{OpPay, ownerName, 0, 10, sawCanc}, // a discrepancy
			{OpHandle, "", 1, 9, changed},
			{OpReconcile, "", 2, 12, sawCanc},
		}},
		{"re-armed while pending, then cancelled", true, []op{
			{OpHandle, "", 0, 1, sawPend},
			{OpTimeout, "", 2, 3, noChange}, // a host whose clock runs ahead: not due
			{OpHandle, "", 4, 5, changed},
		}},
		{"a failed payment that committed after it returned", true, []op{
			{OpPay, ownerName, 0, 5, unknown},
			{OpRead, "", 6, 7, sawPend},
			{OpRead, "", 8, 9, sawPaid},
			{OpHandle, "", 10, 11, sawFinal},
		}},
		{"a failed cancel that never took effect", true, []op{
			{OpUserCancel, ownerName, 0, 5, unknown},
			{OpPay, ownerName, 6, 7, changed},
		}},
		{"another user is refused", true, []op{
			{OpUserCancel, "mallory", 0, 1, notOwner},
			{OpPay, "mallory", 0, 1, notOwner},
			{OpRead, "", 2, 3, sawPend},
		}},

		{"BAD: two winners (I1)", false, []op{
			{OpPay, ownerName, 0, 10, changed},
			{OpHandle, "", 11, 20, changed},
		}},
		{"BAD: two concurrent winners (I1)", false, []op{
			{OpPay, ownerName, 0, 10, changed},
			{OpUserCancel, ownerName, 1, 9, changed},
		}},
		{"BAD: paid, then read back as pending", false, []op{
			{OpPay, ownerName, 0, 10, changed},
			{OpRead, "", 11, 12, sawPend},
		}},
		{"BAD: a discrepancy for an order nobody cancelled", false, []op{
			{OpPay, ownerName, 0, 10, sawCanc},
			{OpRead, "", 11, 12, sawPend},
		}},
		{"BAD: re-armed after the order was cancelled", false, []op{
			{OpUserCancel, ownerName, 0, 1, changed},
			{OpHandle, "", 2, 3, sawPend},
		}},
		{"BAD: another user's cancel took effect", false, []op{
			{OpUserCancel, "mallory", 0, 1, changed},
		}},
		{"BAD: another user's failed cancel took effect", false, []op{
			{OpUserCancel, "mallory", 0, 1, unknown},
			{OpRead, "", 2, 3, sawCanc},
		}},
		{"BAD: the owner refused as not the owner", false, []op{
			{OpPay, ownerName, 0, 1, notOwner},
		}},
		{"BAD: a timeout saw a decision that never happened", false, []op{
			{OpHandle, "", 0, 1, sawFinal},
			{OpRead, "", 2, 3, sawPend},
		}},
		{"BAD: a read cannot pay", false, []op{
			{OpRead, "", 0, 1, unknown},
			{OpRead, "", 2, 3, sawPaid},
		}},
		{"BAD: an existing order reported missing", false, []op{
			{OpHandle, "", 0, 1, missing},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, bad := history("o1", c.ops...).Check(10*time.Second, 5)
			if c.ok {
				assert.Equal(t, porcupine.Ok, res, "%s", strings.Join(bad, "\n"))
				assert.Empty(t, bad)
			} else {
				assert.Equal(t, porcupine.Illegal, res)
				require.Len(t, bad, 1)
				assert.Contains(t, bad[0], "order o1 is not linearizable")
			}
		})
	}
}

// A bad order among many good ones is found and named.
func TestHistoryCheckPartitions(t *testing.T) {
	h := NewHistory()
	for i := 0; i < 200; i++ {
		in := Input{Order: fmt.Sprintf("o%03d", i), Owner: ownerName}
		pay, cancel := in, in
		pay.Kind, pay.Actor, cancel.Kind = OpPay, ownerName, OpHandle
		h.Add(pay, 0, changed, 10)
		out := sawFinal
		if i == 137 {
			out = changed // a second winner
		}
		h.Add(cancel, 5, out, 15)
	}
	res, bad := h.Check(10*time.Second, 5)
	assert.Equal(t, porcupine.Illegal, res)
	require.Len(t, bad, 1)
	assert.Contains(t, bad[0], "order o137 ")
}

// The recorder with real goroutines: a linearizable history passes.
func TestHistoryRecorder(t *testing.T) {
	h := NewHistory()
	in := Input{Order: "o1", Kind: OpPay, Owner: ownerName, Actor: ownerName}
	done := h.Begin(in)
	done(changed)
	h.Begin(Input{Order: "o1", Kind: OpRead, Owner: ownerName})(sawPaid)
	res, bad := h.Check(time.Second, 1)
	assert.Equal(t, porcupine.Ok, res, "%v", bad)
	assert.Len(t, h.Operations(), 2)
	assert.Equal(t, 0, Races(h.Operations()))
}

func TestRaces(t *testing.T) {
	h := history("o1",
		op{OpPay, ownerName, 0, 10, changed},
		op{OpHandle, "", 5, 20, sawFinal},
	)
	h2 := history("o2",
		op{OpPay, ownerName, 0, 10, changed},
		op{OpHandle, "", 11, 20, sawFinal}, // not concurrent
		op{OpUserCancel, "mallory", 1, 2, notOwner},
	)
	assert.Equal(t, 1, Races(append(h.Operations(), h2.Operations()...)))
}

func TestOutputs(t *testing.T) {
	boom := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	assert.Equal(t, changed, PayOutput(cancel.Result{Changed: true}, nil))
	cancelled, paid := expiry.Order{Status: expiry.StatusCancelled}, expiry.Order{Status: expiry.StatusPaid}
	assert.Equal(t, sawCanc, PayOutput(cancel.Result{Order: cancelled}, fmt.Errorf("x: %w", cancel.ErrDiscrepancy)))
	assert.Equal(t, sawPaid, PayOutput(cancel.Result{Order: paid, PaymentID: "p1"}, fmt.Errorf("x: payment p2: %w", cancel.ErrDiscrepancy)), "paid by another payment")
	assert.Equal(t, sawPaid, PayOutput(cancel.Result{Order: paid, PaymentID: "p1"}, nil), "the same payment again")
	assert.Equal(t, notOwner, PayOutput(cancel.Result{}, fmt.Errorf("x: %w", cancel.ErrNotOwner)))
	assert.Equal(t, Output{Res: ResUnknown, Err: "refused"}, PayOutput(cancel.Result{}, boom))
	assert.Equal(t, sawPaid, CancelOutput(cancel.Result{Order: expiry.Order{Status: expiry.StatusPaid}}, nil))
	assert.Equal(t, sawFinal, HandleOutput(expiry.OutcomeFinal, nil))
	assert.Equal(t, sawPend, HandleOutput(expiry.OutcomeRearmed, nil))
	assert.Equal(t, ResUnknown, HandleOutput(expiry.OutcomeFailed, boom).Res)
	assert.Equal(t, noChange, TimeoutOutput(false, nil))
	assert.Equal(t, missing, ReadOutput(expiry.Order{}, fmt.Errorf("x: %w", expiry.ErrNotFound)))
}

func TestErrKind(t *testing.T) {
	ctx, stop := context.WithTimeout(context.Background(), 0)
	defer stop()
	<-ctx.Done()
	for err, want := range map[error]string{
		fmt.Errorf("sqlstore: %w", ctx.Err()):                           "timeout",
		errors.New("dial tcp 127.0.0.1:5: connect: connection refused"): "refused",
		errors.New("read tcp 1->2: read: connection reset by peer"):     "conn_lost",
		errors.New("LOADING Redis is loading the dataset in memory"):    "redis_loading",
		fmt.Errorf("x: %w", ErrBroker):                                  "broker",
		errors.New("sqlstore: a cancel is either the user's or due"):    "other",
	} {
		assert.Equal(t, want, ErrKind(err), "%v", err)
	}
}
