package redisseat_test

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

func TestRedis(t *testing.T) {
	canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatStore {
		return redisseat.New(testenv.Redis(t))
	})
}

// miniredis runs the same Lua scripts; the embedded demo relies on it.
func TestMiniredis(t *testing.T) {
	canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatStore {
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		return redisseat.New(rdb)
	})
}
