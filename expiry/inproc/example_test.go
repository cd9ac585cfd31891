package inproc_test

import (
	"context"
	"fmt"
	"time"

	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/expiry/inproc"
	"github.com/seatflow/orderexpiry/levels"
)

type printer struct{}

func (printer) Process(_ context.Context, d expiry.Delivery) expiry.Verdict {
	fmt.Printf("delivered %q\n", d.Body)
	return expiry.Ack
}

// In levels mode a 7-second delay is delivered after the 5s level: early, as
// RocketMQ would, and the Handler re-arms it for the rest.
func Example() {
	clock := expirytest.NewFakeClock(time.Unix(0, 0))
	s := inproc.New(inproc.Config{Runtime: expiry.Runtime{Clock: clock}, Levels: levels.Default})
	defer s.Close()
	s.Attach(printer{}) // in a host: expiry.NewShell(handler)
	if err := s.Send(context.Background(), expiry.Message{OrderNo: "A1", Hop: 1}, 7*time.Second); err != nil {
		panic(err)
	}
	clock.Advance(5 * time.Second)
	// Output: delivered "oe1 A1 1"
}
