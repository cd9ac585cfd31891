package redisseat_test

import (
	"context"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
)

// scriptReply replaces the reply of every script call with reply (nil:
// the server's own), as a proxy or a server answering something else
// would.
type scriptReply struct{ reply []any }

func (h *scriptReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.rewrite(cmd)
		return err
	}
}

func (h *scriptReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.rewrite(cmd)
		}
		return err
	}
}

func (h *scriptReply) rewrite(cmd redis.Cmder) {
	c, ok := cmd.(*redis.Cmd)
	if !ok || h.reply == nil || c.Err() != nil || (c.Name() != "evalsha" && c.Name() != "eval") {
		return
	}
	c.SetVal(h.reply)
}

// A lock reply whose id is not a lock id is an error, never an id handed
// to the caller: the placer stores the id with the order, and the
// reconciler and every release name the lock by it, so an id that names
// no lock would leave the order's seats to be judged as another lock's.
// Like every Lock error it names the order, for the placer's log.
func TestLockRefusesAReplyWithoutALockID(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		reply []any
	}{
		{"empty id", []any{int64(1), int64(0), ""}},
		{"not digits", []any{int64(1), int64(0), "12.x"}},
		{"a separator in it", []any{int64(1), int64(0), "12|3"}},
		{"not a string", []any{int64(1), int64(0), int64(12)}},
		{"too short", []any{int64(1)}},
		{"a lock without its id", []any{int64(1), int64(0)}},
		{"an unknown code", []any{int64(7), int64(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mr := miniredis.RunT(t)
			rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
			t.Cleanup(func() { rdb.Close() })
			hook := &scriptReply{}
			rdb.AddHook(hook)
			s, err := redisseat.New(rdb, "oe")
			require.NoError(t, err)

			hook.reply = tc.reply
			id, err := s.Lock(ctx, cancel.Hold{ShowID: "s1", OrderNo: "o1", UserID: "u1", Seats: []string{"a1"}}, 0)
			require.Error(t, err)
			assert.Empty(t, id)
			assert.True(t, strings.HasPrefix(err.Error(), "redisseat: lock o1: "), "the error names the order: %v", err)

			// The server's own replies: a lock id, and a taken seat's
			// error naming the order the same way.
			hook.reply = nil
			id, err = s.Lock(ctx, cancel.Hold{ShowID: "s1", OrderNo: "o2", UserID: "u1", Seats: []string{"b1"}}, 0)
			require.NoError(t, err)
			require.NoError(t, cancel.ValidateLockID(id))
			assert.NotEmpty(t, id)
			_, err = s.Lock(ctx, cancel.Hold{ShowID: "s1", OrderNo: "o3", UserID: "u1", Seats: []string{"b1"}}, 0)
			require.ErrorIs(t, err, cancel.ErrSeatUnavailable)
			assert.True(t, strings.HasPrefix(err.Error(), "redisseat: lock o3: "), "%v", err)
		})
	}
}
