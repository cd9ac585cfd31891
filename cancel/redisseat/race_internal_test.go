package redisseat

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// Lock races ScanLocks, which unlists shows whose lock index is empty, on a
// real Redis and a real Cluster, with the windows of the listing protocol
// widened by random pauses (between a Lock's first SADD and its script,
// between a scan finding an index empty and its SREM, between that SREM and
// its re-check). After every round, once all calls returned, a show that
// holds a lock must be listed, or the reconciler would never see it. Each
// round the show's index goes from empty to one lock while two scanners loop.
// Removing either half of the protocol (the SADD after a lock that found the
// index empty, or the scan's re-check after its SREM) makes this fail.
func TestLockScanRaceKeepsLockedShowsListed(t *testing.T) {
	for name, rdb := range map[string]redis.UniversalClient{"redis": testenv.Redis(t), "cluster": testenv.RedisCluster(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s, err := New(rdb, "oe-"+testenv.Unique())
			require.NoError(t, err)
			s.pause = func(string) {
				if rand.IntN(2) == 0 {
					time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
				}
			}
			show := "show-" + testenv.Unique()
			rounds := 150
			if testing.Short() {
				rounds = 30
			}
			var prev cancel.Hold
			for round := 0; round < rounds; round++ {
				done := make(chan struct{})
				var scans sync.WaitGroup
				for range 2 {
					scans.Add(1)
					go func() {
						defer scans.Done()
						for {
							select {
							case <-done:
								return
							default:
							}
							_, _, err := s.ScanLocks(ctx, "", 10)
							if !assert.NoError(t, err) {
								return
							}
						}
					}()
				}
				if round > 0 {
					_, err := s.Release(ctx, prev) // the index is empty: scans unlist the show
					require.NoError(t, err)
				}
				time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
				prev = cancel.Hold{ShowID: show, OrderNo: fmt.Sprintf("o%d", round), UserID: "u1", Seats: []string{fmt.Sprintf("A%d", round)}}
				require.NoError(t, lockErr(s.Lock(ctx, prev, 0)))
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				close(done)
				scans.Wait()
				shows, err := s.ListedShows(ctx)
				require.NoError(t, err)
				require.True(t, slices.Contains(shows, show), "round %d: the show holds a lock but is not listed", round)
			}
		})
	}
}
