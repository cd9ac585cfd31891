package redisseat_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// BenchmarkScanLocksPass measures one complete ScanLocks pass (count 5000,
// the reconciler's default round) over a show that holds 1M sold seats and
// 1k locks, loaded by pipelined HSET/SADD, against the cost of HSCANning the
// whole seat hash, which is what a pass cost before the lock index. The
// results and the command are in README.md.
func BenchmarkScanLocksPass(b *testing.B) {
	const sold, locked, count = 1_000_000, 1_000, 5000
	ctx := context.Background()
	rdb := testenv.Redis(b)
	ns := "oe-bench-" + testenv.Unique()
	s, err := redisseat.New(rdb, ns)
	require.NoError(b, err)
	show := "bench"
	seatsKey, lockedKey := ns+":{"+show+"}:seats", ns+":{"+show+"}:locked"
	b.Cleanup(func() { rdb.Unlink(context.Background(), seatsKey, lockedKey, ns+":shows") })

	start := time.Now()
	pipe := rdb.Pipeline()
	pairs := make([]any, 0, 2000)
	for i := 0; i < sold; i++ {
		pairs = append(pairs, fmt.Sprintf("S%07d", i), fmt.Sprintf("S|paid%07d|u%d", i/4, i%1000))
		if len(pairs) == cap(pairs) {
			pipe.HSet(ctx, seatsKey, pairs...)
			pairs = pairs[:0]
			if pipe.Len() == 100 {
				_, err := pipe.Exec(ctx)
				require.NoError(b, err)
			}
		}
	}
	lockedAt := time.Now().UnixMilli()
	for i := 0; i < locked; i++ {
		seat := fmt.Sprintf("L%04d", i)
		pipe.HSet(ctx, seatsKey, seat, fmt.Sprintf("L|o%04d|u%d|%d", i/2, i%100, lockedAt))
		pipe.SAdd(ctx, lockedKey, seat)
	}
	pipe.SAdd(ctx, ns+":shows", show)
	_, err = pipe.Exec(ctx)
	require.NoError(b, err)
	require.Equal(b, int64(sold+locked), rdb.HLen(ctx, seatsKey).Val())
	b.Logf("loaded %d sold seats and %d locks in %v", sold, locked, time.Since(start).Round(time.Millisecond))

	var scanNs, hscanNs float64
	b.Run("ScanLocks", func(b *testing.B) {
		var found, calls int
		for b.Loop() {
			cursor := ""
			for {
				locks, next, err := s.ScanLocks(ctx, cursor, count)
				if err != nil {
					b.Fatal(err)
				}
				found += len(locks)
				calls++
				if cursor = next; cursor == "" {
					break
				}
			}
		}
		if found != locked*b.N {
			b.Fatalf("found %d locks in %d passes, want %d per pass", found, b.N, locked)
		}
		// Entries examined: the index's members (one per lock) and the show.
		b.ReportMetric(float64(found)/float64(b.N)+1, "entries/pass")
		b.ReportMetric(float64(calls)/float64(b.N), "calls/pass")
		scanNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("HSCANWholeHash", func(b *testing.B) {
		var entries, calls int
		for b.Loop() {
			var cur uint64
			for {
				kv, next, err := rdb.HScan(ctx, seatsKey, cur, "", count).Result()
				if err != nil {
					b.Fatal(err)
				}
				entries += len(kv) / 2
				calls++
				if cur = next; cur == 0 {
					break
				}
			}
		}
		b.ReportMetric(float64(entries)/float64(b.N), "entries/pass")
		b.ReportMetric(float64(calls)/float64(b.N), "calls/pass")
		hscanNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	if scanNs > 0 && hscanNs > 0 {
		b.Logf("a ScanLocks pass costs 1/%.0f of HSCANning the whole hash (%.3f ms vs %.1f ms)", hscanNs/scanNs, scanNs/1e6, hscanNs/1e6)
	}
}
