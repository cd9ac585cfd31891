package redisseat_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
)

// Lock at placement, release at cancel: only seats still locked by the
// order go back, and the user's counter goes down by exactly that many.
func Example() {
	ctx := context.Background()
	m, err := miniredis.Run() // any Redis; miniredis runs the same Lua
	if err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	seats, err := redisseat.New(rdb, "") // the default namespace, "oe"
	if err != nil {
		panic(err)
	}

	a := cancel.Hold{ShowID: "show42", OrderNo: "A1", UserID: "alice", Seats: []string{"r1c1", "r1c2"}}
	_, err = seats.Lock(ctx, a, 4)
	fmt.Println("locked:", err)
	_, err = seats.Lock(ctx, cancel.Hold{ShowID: "show42", OrderNo: "B1", UserID: "bob", Seats: []string{"r1c2"}}, 4)
	fmt.Println("bob:", errors.Is(err, cancel.ErrSeatUnavailable))

	for _, what := range []string{"released", "released again"} {
		n, err := seats.Release(ctx, a)
		if err != nil {
			panic(err)
		}
		fmt.Println(what, n)
	}
	held, err := seats.Held(ctx, "show42", "alice")
	if err != nil {
		panic(err)
	}
	fmt.Println("alice holds", held)
	// Output:
	// locked: <nil>
	// bob: true
	// released 2
	// released again 0
	// alice holds 0
}
