package canceltest_test

import (
	"testing"

	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/memstore"
)

// A host with its own seat store runs the suite from one of its tests.
func ExampleRunSeats() {
	_ = func(t *testing.T) {
		canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatStore {
			return memstore.NewSeats(nil) // your adapter here
		})
	}
}
