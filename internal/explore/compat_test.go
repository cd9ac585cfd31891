package explore

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// The library's API changed while this package was written (the purchase
// limit moved from Place's argument into cancel.Placement.Limit; Shorten's
// sink moved from cancel.Config.Sender to Config.Scheduler; seat stores
// gained scopes, memstore.Seats.Scoped; locks gained ids, LockID). These helpers
// reach what moved through whichever form the library has, so that the
// explorer builds against the code before the fixes and after them (the
// known holes are found on the former). Once the API settles they can be
// inlined.

// withLimit returns p with its purchase limit, where the library keeps it
// (the store keeps it with the order, so the host's insert must get this p).
func withLimit(p cancel.Placement, limit int) cancel.Placement {
	if f := reflect.ValueOf(&p).Elem().FieldByName("Limit"); f.IsValid() && f.CanSet() && f.Kind() == reflect.Int {
		f.SetInt(int64(limit))
	}
	return p
}

// place calls svc.Place with p (from withLimit) and the purchase limit
// wherever the library takes it; insert gets the placement as Place hands
// it to the host (with its lock id, since locks are named).
func place(ctx context.Context, svc *cancel.Service, p cancel.Placement, limit int, insert func(context.Context, cancel.Placement) error) error {
	bound := func(ctx context.Context) error { return insert(ctx, p) }
	switch call := any(svc.Place).(type) {
	case func(context.Context, cancel.Placement, func(context.Context, cancel.Placement) error) error:
		return call(ctx, p, insert)
	case func(context.Context, cancel.Placement, func(context.Context) error) error:
		return call(ctx, p, bound)
	case func(context.Context, cancel.Placement, int, func(context.Context) error) error:
		return call(ctx, p, limit, bound)
	default:
		panic(fmt.Sprintf("explore: cancel.Service.Place has a signature this package does not know: %T", svc.Place))
	}
}

// placeSchedules says whether cancel.Service.Place sends the expiry message
// itself, through Config.Scheduler, once the host's insert returned nil.
// Before, the host's insert scheduled it, and the Scheduler had InTx for
// that.
var placeSchedules = func() bool {
	_, before := reflect.TypeOf((*expiry.Scheduler)(nil)).MethodByName("InTx")
	return !before
}()

// withShortenSink gives c what Shorten sends the new expiry message
// through: the Scheduler, or (before) the Sender.
func withShortenSink(c cancel.Config, sched *expiry.Scheduler, sender expiry.DelaySender) cancel.Config {
	v := reflect.ValueOf(&c).Elem()
	switch sink := shortenSink(); {
	case sink.scheduler != nil:
		v.FieldByIndex(sink.scheduler).Set(reflect.ValueOf(sched))
	case sink.sender != nil:
		v.FieldByIndex(sink.sender).Set(reflect.ValueOf(sender))
	}
	return c
}

// shortenSink finds, once, the field of cancel.Config that withShortenSink
// sets (every world builds three Services).
var shortenSink = sync.OnceValue(func() (sink struct{ scheduler, sender []int }) {
	t := reflect.TypeOf(cancel.Config{})
	if f, ok := t.FieldByName("Scheduler"); ok && f.Type == reflect.TypeOf((*expiry.Scheduler)(nil)) {
		sink.scheduler = f.Index
	} else if f, ok := t.FieldByName("Sender"); ok && f.Type == reflect.TypeOf((*expiry.DelaySender)(nil)).Elem() {
		sink.sender = f.Index
	}
	return sink
})

// scopedSeats returns the scope of the seat store s (memstore.Seats.Scoped:
// one Redis, keys under the scope), or, before seat stores had scopes, a
// seat store of its own, which is what a scope amounts to.
func scopedSeats(s *memstore.Seats, scope string, now func() time.Time) *memstore.Seats {
	if sc, ok := any(s).(interface {
		Scoped(scope string) *memstore.Seats
	}); ok {
		return sc.Scoped(scope)
	}
	return memstore.NewSeats(now)
}

// lockID returns the LockID of a cancel.Hold, SeatLock or SeatState of
// show ("" if the library's has none: before a release named the lock it
// judged), with its show (a lock is named by its show and its id), wrapped
// in ⟨⟩ so that the state hash can rename lock ids canonically.
func lockID(show string, v any) string {
	f := reflect.ValueOf(v).FieldByName("LockID")
	if !f.IsValid() || f.Kind() != reflect.String || f.String() == "" {
		return ""
	}
	return "⟨" + show + " " + f.String() + "⟩"
}
