package levels_test

import (
	"fmt"
	"time"

	"github.com/seatflow/orderexpiry/levels"
)

func ExampleTable_For() {
	// The greedy rule: the largest level not above the remaining time.
	fmt.Println(levels.Default.Delay(levels.Default.For(15 * time.Minute)))
	fmt.Println(levels.Default.Delay(levels.Default.For(3 * time.Second)))
	// Output:
	// 10m0s
	// 1s
}

func ExampleTable_Plan() {
	// After a 10m hop that took 50ms in transit, 4m59.95s are left.
	left := 5*time.Minute - 50*time.Millisecond
	fmt.Println(levels.Default.Delay(levels.Default.Plan(left, 0)))
	fmt.Println(levels.Default.Delay(levels.Default.Plan(left, time.Second)))
	// Output:
	// 4m0s
	// 5m0s
}

func ExampleSimulate() {
	transit := func(int) time.Duration { return 50 * time.Millisecond }
	for _, slack := range []time.Duration{0, time.Second} {
		c := levels.Simulate(levels.Default, 15*time.Minute, slack, transit)
		fmt.Printf("slack %v: %d hops, %v late\n", slack, c.Hops(), c.Late)
	}
	// Output:
	// slack 0s: 11 hops, 550ms late
	// slack 1s: 2 hops, 100ms late
}

func ExampleParse() {
	tbl, err := levels.Parse("1s 2s 4s 8s")
	if err != nil {
		panic(err)
	}
	fmt.Println(tbl.Len(), tbl.Delay(3))
	_, err = levels.Parse("5s 1s")
	fmt.Println(err)
	// Output:
	// 4 4s
	// levels: invalid messageDelayLevel spec: level 2 "1s" is not longer than level 1 "5s"
}
