package corpus

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// IDs gives a suite's string ids ("alice", "show-1") to a store whose
// column for them is an integer, as the host would give its own: each valid
// id gets a number of its own, the same id always the same one, and a
// number read back is turned back into its id. A bijection, so ownership
// and exact matching ("ALICE" is not "alice") mean what they meant. The
// zero IDs is ready to use.
type IDs struct {
	mu     sync.Mutex
	number map[string]string
	id     map[string]string
}

// To is id's number (an invalid id reaches the store as it is).
func (n *IDs) To(id string) string {
	if expiry.ValidateID("id", id) != nil {
		return id
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.number == nil {
		n.number, n.id = map[string]string{}, map[string]string{}
	}
	v, ok := n.number[id]
	if !ok {
		v = strconv.Itoa(1000 + len(n.number))
		n.number[id], n.id[v] = v, id
	}
	return v
}

// From is the id of number v (v itself if no id has it).
func (n *IDs) From(v string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if id, ok := n.id[v]; ok {
		return id
	}
	return v
}

// Store is what Translate wraps: a mapped sqlstore.Store (or a view of it)
// as the store suite and the model test use it.
type Store interface {
	cancel.OrderStore
	Now(ctx context.Context) (time.Time, error)
}

// Translated is a Store seen through IDs for its user ids (Users, nil:
// as they are), its show ids (Shows) and its order numbers (Orders).
// Without Late it cannot reinstate (cancel.ErrUnsupported, as a store
// that cannot tell a timeout's cancel), without Deadline it moves no
// deadline (as a mapping without a deadline column).
type Translated struct {
	Inner                Store
	Users, Shows, Orders *IDs
	Late, Deadline       bool
}

// View returns s seen through t's IDs, with late payments when late is
// true (a mapping that can tell a timeout's cancel: CanReinstate) and
// deadline control when deadline is true (a Deadline column).
func (t Translated) View(s Store, late, deadline bool) Translated {
	t.Inner, t.Late, t.Deadline = s, late, deadline
	return t
}

// CanReinstate reports whether a store of m can tell a cancel by the
// timeout or the reconciler from the others (a reason column, or statuses
// of their own), which a late payment's reinstatement needs.
func CanReinstate(m sqlstore.Mapping) bool {
	if m.Orders.CancelReason != "" {
		return true
	}
	st := m.Orders.Statuses
	of := func(r cancel.Reason) any {
		if v, ok := st.CancelledBy[r]; ok {
			return v
		}
		return st.Cancelled[0]
	}
	for _, other := range []cancel.Reason{cancel.ReasonUser, cancel.ReasonExpireNow} {
		for _, late := range []cancel.Reason{cancel.ReasonTimeout, cancel.ReasonReconcile} {
			if of(other) == of(late) {
				return false
			}
		}
	}
	return true
}

func (t Translated) nTo(no string) string {
	if t.Orders == nil || no == "" {
		return no
	}
	return t.Orders.To(no)
}

func (t Translated) nFrom(no string) string {
	if t.Orders == nil {
		return no
	}
	return t.Orders.From(no)
}

func (t Translated) uTo(u string) string {
	if t.Users == nil || u == "" {
		return u
	}
	return t.Users.To(u)
}

func (t Translated) uFrom(u string) string {
	if t.Users == nil {
		return u
	}
	return t.Users.From(u)
}

func (t Translated) sTo(s string) string {
	if t.Shows == nil || s == "" {
		return s
	}
	return t.Shows.To(s)
}

func (t Translated) sFrom(s string) string {
	if t.Shows == nil {
		return s
	}
	return t.Shows.From(s)
}

// Placement is p as the store must see it.
func (t Translated) Placement(p cancel.Placement) cancel.Placement {
	p.OrderNo, p.UserID, p.ShowID = t.nTo(p.OrderNo), t.uTo(p.UserID), t.sTo(p.ShowID)
	return p
}

func (t Translated) order(o expiry.Order) expiry.Order {
	o.No, o.UserID, o.ShowID = t.nFrom(o.No), t.uFrom(o.UserID), t.sFrom(o.ShowID)
	return o
}

func (t Translated) result(r cancel.Result) cancel.Result {
	r.Order = t.order(r.Order)
	return r
}

// Order implements cancel.OrderStore.
func (t Translated) Order(ctx context.Context, no string) (expiry.Order, error) {
	o, err := t.Inner.Order(ctx, t.nTo(no))
	return t.order(o), err
}

// CancelPending implements cancel.OrderStore.
func (t Translated) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	req.OrderNo, req.UserID = t.nTo(req.OrderNo), t.uTo(req.UserID)
	res, err := t.Inner.CancelPending(ctx, req)
	return t.result(res), err
}

// PayPending implements cancel.OrderStore.
func (t Translated) PayPending(ctx context.Context, p cancel.Payment) (cancel.Result, error) {
	p.OrderNo, p.UserID = t.nTo(p.OrderNo), t.uTo(p.UserID)
	res, err := t.Inner.PayPending(ctx, p)
	return t.result(res), err
}

// ReinstateCancelled implements cancel.OrderStore: the inner store's, whose
// claim callback sees the caller's ids.
func (t Translated) ReinstateCancelled(ctx context.Context, p cancel.Payment, claim func(ctx context.Context, h cancel.Hold, limit int) (string, error)) (cancel.Result, error) {
	if !t.Late {
		return cancel.Result{}, fmt.Errorf("corpus: this mapping cannot tell a timeout's cancel: %w", cancel.ErrUnsupported)
	}
	p.OrderNo, p.UserID = t.nTo(p.OrderNo), t.uTo(p.UserID)
	res, err := t.Inner.ReinstateCancelled(ctx, p, func(ctx context.Context, h cancel.Hold, limit int) (string, error) {
		h.OrderNo, h.UserID, h.ShowID = t.nFrom(h.OrderNo), t.uFrom(h.UserID), t.sFrom(h.ShowID)
		return claim(ctx, h, limit)
	})
	return t.result(res), err
}

// MarkWarned implements cancel.OrderStore.
func (t Translated) MarkWarned(ctx context.Context, no string, lead time.Duration) (expiry.WarnResult, error) {
	res, err := t.Inner.MarkWarned(ctx, t.nTo(no), lead)
	res.Order = t.order(res.Order)
	return res, err
}

// RecordDiscrepancy implements cancel.OrderStore.
func (t Translated) RecordDiscrepancy(ctx context.Context, d cancel.Discrepancy) (bool, error) {
	d.OrderNo, d.UserID = t.nTo(d.OrderNo), t.uTo(d.UserID)
	return t.Inner.RecordDiscrepancy(ctx, d)
}

// ClaimDiscrepancies implements cancel.OrderStore.
func (t Translated) ClaimDiscrepancies(ctx context.Context, lease time.Duration, limit int) ([]cancel.Discrepancy, error) {
	ds, err := t.Inner.ClaimDiscrepancies(ctx, lease, limit)
	for i := range ds {
		ds[i].OrderNo, ds[i].UserID = t.nFrom(ds[i].OrderNo), t.uFrom(ds[i].UserID)
	}
	return ds, err
}

// SettleDiscrepancy implements cancel.OrderStore.
func (t Translated) SettleDiscrepancy(ctx context.Context, paymentID string) error {
	return t.Inner.SettleDiscrepancy(ctx, paymentID)
}

// Expired implements cancel.OrderStore.
func (t Translated) Expired(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	nos, next, err := t.Inner.Expired(ctx, cursor, limit)
	for i := range nos {
		nos[i] = t.nFrom(nos[i])
	}
	return nos, next, err
}

// Statuses implements cancel.OrderStore.
func (t Translated) Statuses(ctx context.Context, nos []string) (map[string]cancel.OrderState, error) {
	in := make([]string, len(nos))
	for i, no := range nos {
		in[i] = t.nTo(no)
	}
	m, err := t.Inner.Statuses(ctx, in)
	if m == nil {
		return m, err
	}
	out := make(map[string]cancel.OrderState, len(m))
	for k, v := range m {
		v.ShowID = t.sFrom(v.ShowID)
		out[t.nFrom(k)] = v
	}
	return out, err
}

// Claims implements cancel.OrderStore.
func (t Translated) Claims(ctx context.Context, cursor string, limit int) ([]cancel.Claim, string, error) {
	cs, next, err := t.Inner.Claims(ctx, cursor, limit)
	for i := range cs {
		cs[i].OrderNo, cs[i].UserID, cs[i].ShowID = t.nFrom(cs[i].OrderNo), t.uFrom(cs[i].UserID), t.sFrom(cs[i].ShowID)
	}
	return cs, next, err
}

// Now is the store's clock.
func (t Translated) Now(ctx context.Context) (time.Time, error) { return t.Inner.Now(ctx) }

// Scope implements cancel.OrderStore.
func (t Translated) Scope() string { return t.Inner.Scope() }

// SetDeadline implements cancel.OrderStore.
func (t Translated) SetDeadline(ctx context.Context, c cancel.DeadlineChange) (cancel.DeadlineResult, error) {
	if !t.Deadline {
		return cancel.DeadlineResult{}, fmt.Errorf("corpus: this mapping has no deadline column: %w", cancel.ErrUnsupported)
	}
	c.OrderNo, c.UserID = t.nTo(c.OrderNo), t.uTo(c.UserID)
	res, err := t.Inner.SetDeadline(ctx, c)
	res.Order = t.order(res.Order)
	return res, err
}

// CancelDue implements cancel.OrderStore.
func (t Translated) CancelDue(ctx context.Context, orderNos []string, reason cancel.Reason) ([]cancel.Result, error) {
	nos := make([]string, len(orderNos))
	for i, no := range orderNos {
		nos[i] = t.nTo(no)
	}
	res, err := t.Inner.CancelDue(ctx, nos, reason)
	for i := range res {
		res[i] = t.result(res[i])
	}
	return res, err
}
