package storm

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// OpKind is the library call an operation of a History made.
type OpKind uint8

// The operations the storm records, per order.
const (
	// OpPay is cancel.Service.Pay (a payment callback); it moves pending to paid.
	OpPay OpKind = iota + 1
	// OpUserCancel is cancel.Service.UserCancel; it moves pending to cancelled.
	OpUserCancel
	// OpHandle is expiry.Handler.Handle (a delivered timeout message).
	OpHandle
	// OpTimeout is cancel.Service.Timeout called directly, as a host whose
	// clock runs ahead would; it may only cancel a due order.
	OpTimeout
	// OpReconcile is one cancel the reconciler's expired scan made.
	OpReconcile
	// OpRead is a status read (sqlstore.Store.Order).
	OpRead
)

var opNames = [...]string{"?", "pay", "user_cancel", "handle", "timeout", "reconcile", "read"}

func (k OpKind) String() string {
	if int(k) < len(opNames) {
		return opNames[k]
	}
	return "?"
}

// target is the status a successful call of k moves a pending order to, or
// pending for calls that change nothing.
func (k OpKind) target() expiry.Status {
	switch k {
	case OpPay:
		return expiry.StatusPaid
	case OpUserCancel, OpHandle, OpTimeout, OpReconcile:
		return expiry.StatusCancelled
	}
	return expiry.StatusPending
}

// Input is what an operation was asked to do.
type Input struct {
	Order string
	Kind  OpKind
	Owner string // the order's user
	Actor string // the user on whose behalf the call ran; "" for none (a callback without user, a timeout)
	// Payment is the provider's payment id of an OpPay. The model does not
	// track it: which payment pays is the refund check's concern, not the
	// order's state machine's.
	Payment string
}

// eligible reports whether the call may change the order at all: any call
// without a user, or the owner's own call.
func (in Input) eligible() bool { return in.Actor == "" || in.Actor == in.Owner }

// Res says what an operation observed.
type Res uint8

// The results an operation can have.
const (
	// ResChanged: this call moved the order out of pending (Result.Changed,
	// expiry.OutcomeCancelled).
	ResChanged Res = iota + 1
	// ResSaw: no change; at some moment during the call the order was in
	// Output.Status (a read, the status a losing call reports, a
	// discrepancy: cancelled; a re-arm: pending).
	ResSaw
	// ResSawFinal: no change; at some moment the order was paid or cancelled
	// (expiry.OutcomeFinal).
	ResSawFinal
	// ResNoChange: no change, nothing observed (a direct timeout that found
	// the order not due or already decided).
	ResNoChange
	// ResNotOwner: the call was refused with cancel.ErrNotOwner.
	ResNotOwner
	// ResMissing: the library said the order does not exist.
	ResMissing
	// ResUnknown: the call failed (network, timeout, server down): it may or
	// may not have taken effect, at any moment after it was invoked, even
	// after it returned (a commit whose acknowledgement was lost).
	ResUnknown
)

var resNames = [...]string{"?", "changed", "saw", "saw_final", "no_change", "not_owner", "missing", "unknown"}

func (r Res) String() string {
	if int(r) < len(resNames) {
		return resNames[r]
	}
	return "?"
}

// Output is what an operation returned.
type Output struct {
	Res    Res
	Status expiry.Status // for ResSaw
	Err    string        // for ResUnknown, to describe it
}

func (o Output) String() string {
	switch o.Res {
	case ResSaw:
		return "saw " + o.Status.String()
	case ResUnknown:
		return "unknown (" + o.Err + ")"
	}
	return o.Res.String()
}

// Step is the sequential specification of one order: the set of states the
// order may be in after an operation with input in returned out, from state
// s. An empty result means the operation is impossible from s.
//
// An order starts pending and leaves pending once, to paid (a payment) or to
// cancelled (anything else); only an eligible call may move it; a call that
// failed may or may not have moved it.
func Step(s expiry.Status, in Input, out Output) []expiry.Status {
	t := in.Kind.target()
	switch out.Res {
	case ResChanged:
		if t == expiry.StatusPending || !in.eligible() || s != expiry.StatusPending {
			return nil
		}
		return []expiry.Status{t}
	case ResSaw:
		if s != out.Status {
			return nil
		}
		return []expiry.Status{s}
	case ResSawFinal:
		if s == expiry.StatusPending {
			return nil
		}
		return []expiry.Status{s}
	case ResNoChange:
		return []expiry.Status{s}
	case ResNotOwner:
		if in.eligible() {
			return nil
		}
		return []expiry.Status{s}
	case ResUnknown:
		if t != expiry.StatusPending && in.eligible() && s == expiry.StatusPending {
			return []expiry.Status{s, t}
		}
		return []expiry.Status{s}
	}
	return nil // ResMissing and anything unknown: every order of the storm exists
}

// Model is the porcupine model of the orders: partitioned per order, each
// partition a tiny state machine (Step).
func Model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range h {
				k := op.Input.(Input).Order
				if _, ok := by[k]; !ok {
					keys = append(keys, k)
				}
				by[k] = append(by[k], op)
			}
			sort.Strings(keys)
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, by[k])
			}
			return out
		},
		Init: func() []interface{} { return []interface{}{expiry.StatusPending} },
		Step: func(state, input, output interface{}) []interface{} {
			next := Step(state.(expiry.Status), input.(Input), output.(Output))
			out := make([]interface{}, len(next))
			for i, s := range next {
				out[i] = s
			}
			return out
		},
		DescribeOperation: func(input, output interface{}) string {
			in := input.(Input)
			if in.Payment != "" {
				return fmt.Sprintf("%s(%s by %q, owner %q, payment %s) -> %s", in.Kind, in.Order, in.Actor, in.Owner, in.Payment, output.(Output))
			}
			return fmt.Sprintf("%s(%s by %q, owner %q) -> %s", in.Kind, in.Order, in.Actor, in.Owner, output.(Output))
		},
		DescribeState: func(state interface{}) string { return state.(expiry.Status).String() },
	}
	return nm.ToModel()
}

// History records operations from many goroutines.
type History struct {
	mu   sync.Mutex
	base time.Time
	ops  []porcupine.Operation
}

// NewHistory returns an empty History whose clock starts now.
func NewHistory() *History { return &History{base: time.Now()} }

func (h *History) now() int64 { return int64(time.Since(h.base)) } // monotonic

// Begin records the invocation of an operation; call the returned function
// with its output when it returns.
func (h *History) Begin(in Input) func(Output) {
	call := h.now()
	return func(out Output) {
		ret := h.now()
		h.mu.Lock()
		h.ops = append(h.ops, porcupine.Operation{Input: in, Call: call, Output: out, Return: ret})
		h.mu.Unlock()
	}
}

// Add appends an operation with explicit times (for tests of the checker).
func (h *History) Add(in Input, call int64, out Output, ret int64) {
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

// Operations returns a copy of the recorded operations.
func (h *History) Operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}

// Check verifies that the history is linearizable against Model. Operations
// whose outcome is unknown are given a return time after every other
// operation, since their effect may land after they returned. It returns
// porcupine's verdict and, when it is not Ok, a description of every order
// whose history is not linearizable (at most max of them).
func (h *History) Check(timeout time.Duration, max int) (porcupine.CheckResult, []string) {
	ops := h.Operations()
	var end int64
	for _, op := range ops {
		end = maxInt64(end, op.Return)
	}
	for i := range ops {
		if ops[i].Output.(Output).Res == ResUnknown {
			ops[i].Return = end + 1
		}
	}
	m := Model()
	res := porcupine.CheckOperationsTimeout(m, ops, timeout)
	if res == porcupine.Ok {
		return res, nil
	}
	var bad []string
	for _, part := range m.Partition(ops) {
		if len(bad) >= max {
			break
		}
		if porcupine.CheckOperationsTimeout(m, part, timeout) == porcupine.Ok {
			continue
		}
		sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
		var b strings.Builder
		fmt.Fprintf(&b, "order %s is not linearizable:", part[0].Input.(Input).Order)
		for _, op := range part {
			ret := "∞"
			if op.Return <= end {
				ret = time.Duration(op.Return).String()
			}
			fmt.Fprintf(&b, "\n    [%v, %s] %s", time.Duration(op.Call), ret, m.DescribeOperation(op.Input, op.Output))
		}
		bad = append(bad, b.String())
	}
	return res, bad
}

func maxInt64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// Races counts the orders on which at least two calls that could decide the
// order (payments, cancels, timeouts, reconciler cancels by eligible callers)
// overlapped in time while one of them decided it: the races the library had
// to decide exactly once.
func Races(ops []porcupine.Operation) int {
	by := map[string][]porcupine.Operation{}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Kind == OpRead || !in.eligible() || out.Res == ResNotOwner {
			continue
		}
		by[in.Order] = append(by[in.Order], op)
	}
	n := 0
	for _, list := range by {
	search:
		for i, a := range list {
			if a.Output.(Output).Res != ResChanged {
				continue
			}
			for j, b := range list {
				if i != j && b.Call <= a.Return && a.Call <= b.Return {
					n++
					break search
				}
			}
		}
	}
	return n
}

// Output helpers: map what the library returned to an Output.

// PayOutput maps cancel.Service.Pay's result. A discrepancy saw the order
// in res.Order.Status: cancelled, or paid by another payment.
func PayOutput(res cancel.Result, err error) Output {
	switch {
	case err == nil && res.Changed:
		return Output{Res: ResChanged}
	case err == nil:
		return Output{Res: ResSaw, Status: res.Order.Status}
	case errors.Is(err, cancel.ErrDiscrepancy):
		return Output{Res: ResSaw, Status: res.Order.Status}
	}
	return errOutput(err)
}

// CancelOutput maps cancel.Service.Cancel/UserCancel's result.
func CancelOutput(res cancel.Result, err error) Output {
	switch {
	case err == nil && res.Changed:
		return Output{Res: ResChanged}
	case err == nil:
		return Output{Res: ResSaw, Status: res.Order.Status}
	}
	return errOutput(err)
}

// HandleOutput maps expiry.Handler.Handle's result.
func HandleOutput(o expiry.Outcome, err error) Output {
	if err != nil {
		return errOutput(err)
	}
	switch o {
	case expiry.OutcomeCancelled:
		return Output{Res: ResChanged}
	case expiry.OutcomeFinal:
		return Output{Res: ResSawFinal}
	case expiry.OutcomeRearmed:
		return Output{Res: ResSaw, Status: expiry.StatusPending}
	case expiry.OutcomeMissing:
		return Output{Res: ResMissing}
	}
	return Output{Res: ResUnknown, Err: "outcome " + o.String() + " without error"}
}

// TimeoutOutput maps cancel.Service.Timeout's result.
func TimeoutOutput(cancelled bool, err error) Output {
	switch {
	case err != nil:
		return errOutput(err)
	case cancelled:
		return Output{Res: ResChanged}
	}
	return Output{Res: ResNoChange}
}

// ReadOutput maps sqlstore.Store.Order's result.
func ReadOutput(o expiry.Order, err error) Output {
	if err != nil {
		return errOutput(err)
	}
	return Output{Res: ResSaw, Status: o.Status}
}

func errOutput(err error) Output {
	switch {
	case errors.Is(err, cancel.ErrNotOwner):
		return Output{Res: ResNotOwner}
	case errors.Is(err, expiry.ErrNotFound):
		return Output{Res: ResMissing}
	}
	return Output{Res: ResUnknown, Err: ErrKind(err)}
}
