package redisseat_test

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

func TestRedis(t *testing.T) {
	canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatStore {
		s, err := redisseat.New(testenv.Redis(t), "oe-"+testenv.Unique())
		require.NoError(t, err)
		return s
	})
}

// miniredis runs the same Lua scripts; the embedded demo relies on it.
func TestMiniredis(t *testing.T) {
	canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatStore {
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		s, err := redisseat.New(rdb, "")
		require.NoError(t, err)
		return s
	})
}

func TestNew(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	_, err := redisseat.New(rdb, "a{b}")
	require.Error(t, err, "a namespace cannot carry a hash tag")
	_, err = redisseat.New(nil, "")
	require.Error(t, err)
}
