package canceltest_test

import (
	"testing"

	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/memstore"
)

// A host with its own seat store runs the suite from one of its tests.
func ExampleRunSeats() {
	_ = func(t *testing.T) {
		canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatsHarness {
			s := memstore.NewSeats(nil) // your adapter here
			// Now and Wipe are optional: they turn on the clock and
			// data-loss cases.
			return canceltest.SeatsHarness{Seats: s, Now: s.Now, Wipe: s.Wipe}
		})
	}
}
