package memstore_test

import (
	"testing"

	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/memstore"
)

// The fakes pass the same suites as the real adapters, so they cannot drift.
func TestStoreConformance(t *testing.T) {
	canceltest.RunStore(t, func(t *testing.T) canceltest.StoreHarness {
		s := memstore.NewStore(nil)
		return canceltest.StoreHarness{Store: s, Place: s.Place, Now: s.Now}
	})
}

func TestSeatsConformance(t *testing.T) {
	canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatStore { return memstore.NewSeats(nil) })
}
