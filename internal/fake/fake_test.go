package fake_test

import (
	"testing"

	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/internal/fake"
)

// The fakes pass the same suites as the real adapters, so they cannot drift.
func TestStoreConformance(t *testing.T) {
	canceltest.RunStore(t, func(t *testing.T) canceltest.StoreHarness {
		s := fake.NewStore(nil)
		return canceltest.StoreHarness{Store: s, Place: s.Place, Now: s.Now}
	})
}

func TestSeatsConformance(t *testing.T) {
	canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatStore { return fake.NewSeats(nil) })
}
