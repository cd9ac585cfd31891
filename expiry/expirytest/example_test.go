package expirytest_test

import (
	"fmt"
	"time"

	"github.com/seatflow/orderexpiry/expiry/expirytest"
)

func ExampleFakeClock() {
	clock := expirytest.NewFakeClock(time.Unix(0, 0).UTC())
	clock.AfterFunc(time.Minute, func() { fmt.Println("fired at", clock.Now().Format(time.TimeOnly)) })
	clock.Advance(30 * time.Second)
	fmt.Println("pending:", clock.Pending())
	clock.Advance(30 * time.Second)
	// Output:
	// pending: 1
	// fired at 00:01:00
}
