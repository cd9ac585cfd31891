package explore

import (
	"context"
	"fmt"
	"reflect"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// The library's API changed while this package was written (the purchase
// limit moved from Place's argument into cancel.Placement.Limit; Shorten's
// sink moved from cancel.Config.Sender to Config.Scheduler). These helpers
// reach what moved through whichever form the library has, so that the
// explorer builds against the code before the fixes and after them (the
// known holes are found on the former). Once the API settles they can be
// inlined.

// place calls svc.Place with the purchase limit wherever the library takes
// it.
func place(ctx context.Context, svc *cancel.Service, p cancel.Placement, limit int, insert func(context.Context) error) error {
	if f := reflect.ValueOf(&p).Elem().FieldByName("Limit"); f.IsValid() && f.CanSet() && f.Kind() == reflect.Int {
		f.SetInt(int64(limit))
	}
	switch call := any(svc.Place).(type) {
	case func(context.Context, cancel.Placement, func(context.Context) error) error:
		return call(ctx, p, insert)
	case func(context.Context, cancel.Placement, int, func(context.Context) error) error:
		return call(ctx, p, limit, insert)
	default:
		panic(fmt.Sprintf("explore: cancel.Service.Place has a signature this package does not know: %T", svc.Place))
	}
}

// withShortenSink gives c what Shorten sends the new expiry message
// through: the Scheduler, or (before) the Sender.
func withShortenSink(c cancel.Config, sched *expiry.Scheduler, sender expiry.DelaySender) cancel.Config {
	v := reflect.ValueOf(&c).Elem()
	if f := v.FieldByName("Scheduler"); f.IsValid() && f.Type() == reflect.TypeOf(sched) {
		f.Set(reflect.ValueOf(sched))
	} else if f := v.FieldByName("Sender"); f.IsValid() && f.Type() == reflect.TypeOf((*expiry.DelaySender)(nil)).Elem() {
		f.Set(reflect.ValueOf(sender))
	}
	return c
}
