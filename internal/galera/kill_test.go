package galera_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// galeraSH returns the path of galera.sh (OE_GALERA_SH), to kill and restart a node.
func galeraSH(t *testing.T) string {
	t.Helper()
	sh := os.Getenv("OE_GALERA_SH")
	if sh == "" {
		if testenv.Required() {
			t.Fatalf("OE_GALERA_SH is required (OE_REQUIRE_SERVERS=1 or CI=true): run the tests with %s", testenv.TestCommand)
		}
		t.Skipf("skipping: OE_GALERA_SH is not set (run %s)", testenv.TestCommand)
	}
	return sh
}

// TestNodeKilledUnderLoad runs placements, payments, user cancels and
// timeouts spread over the three nodes (six workers, each placing through
// one node and deciding through the next), SIGKILLs node 3's mariadbd in the
// middle, restarts it (it rejoins by IST, or SST when the donor's gcache no
// longer has what it missed), and goes on a moment after. The calls that
// failed meanwhile are counted by class; a payment callback that got no
// answer is repeated afterwards (as a provider does), then reconcile rounds
// run, and the outcome ledgers (I14, I15, I17) and "nothing left pending"
// must hold.
func TestNodeKilledUnderLoad(t *testing.T) {
	// The test command's cluster soak (internal/soak, TestSoakGalera) kills a
	// node under load at CI size; this longer run is for the figures of
	// README.md, beside the soak's full size.
	if os.Getenv("OE_SOAK_CLUSTERS") != "full" {
		t.Skip("skipping: run with OE_SOAK_CLUSTERS=full (the test command runs internal/soak's TestSoakGalera instead)")
	}
	sh := galeraSH(t)
	cfgs := nodeDSNs(t)
	ctx := context.Background()
	_, dbs := cluster(t, syncWait)
	show := "galk-" + testenv.Unique()
	ws := worlds(t, dbs, show)
	restarted := false
	t.Cleanup(func() {
		if !restarted { // the test stopped between the kill and the restart
			_ = exec.Command("bash", sh, "start-node", "3").Run()
		}
	})

	now, err := ws[0].Store.Now(ctx)
	require.NoError(t, err)
	base := time.Now()
	dbNow := func() time.Time { return now.Add(time.Since(base)) } // the deadline's rough clock; every decision uses the database's

	var mu sync.Mutex
	var placed []cancel.Placement
	answered := map[string]bool{}
	var unanswered []cancel.Payment
	failed := map[string]int{}
	ops, down := 0, false
	var maxLatency time.Duration
	record := func(op string, node int, err error, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		ops++
		if err != nil && !errors.Is(err, cancel.ErrDiscrepancy) {
			k := fmt.Sprintf("%s node%d %s", op, node+1, classify(err))
			if down {
				k += " (node 3 down)"
			}
			failed[k]++
		} else if d > maxLatency {
			maxLatency = d
		}
	}

	loadCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			node, other := w%3, (w+1)%3
			type due struct {
				no string
				at time.Time
			}
			var dues []due
			for seq := 0; loadCtx.Err() == nil; seq++ {
				p := cancel.Placement{OrderNo: fmt.Sprintf("%s-w%d-%d", show, w, seq), UserID: fmt.Sprintf("u%d", w), ShowID: show,
					Seats: []string{fmt.Sprintf("w%d-%d-a", w, seq), fmt.Sprintf("w%d-%d-b", w, seq)}, ExpireAt: dbNow().Add(300 * time.Millisecond)}
				opCtx, done := context.WithTimeout(ctx, 10*time.Second)
				t0 := time.Now()
				err := ws[node].Place(opCtx, p)
				record("place", node, err, time.Since(t0))
				mu.Lock()
				placed = append(placed, p) // also when it failed: it may exist (an unknown commit)
				mu.Unlock()
				if err == nil {
					switch r := rng.IntN(10); {
					case r < 4:
						pay := cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-" + p.OrderNo}
						t0 = time.Now()
						_, err := ws[other].Service.Pay(opCtx, pay)
						record("pay", other, err, time.Since(t0))
						mu.Lock()
						if err == nil || errors.Is(err, cancel.ErrDiscrepancy) {
							answered[pay.PaymentID] = true
						} else {
							unanswered = append(unanswered, pay)
						}
						mu.Unlock()
					case r < 6:
						t0 = time.Now()
						_, err := ws[other].Service.UserCancel(opCtx, p.OrderNo, p.UserID)
						record("user cancel", other, err, time.Since(t0))
					default:
						dues = append(dues, due{p.OrderNo, p.ExpireAt})
					}
				}
				for len(dues) > 0 && dues[0].at.Add(50*time.Millisecond).Before(dbNow()) {
					t0 = time.Now()
					_, _, err := ws[other].Service.Timeout(opCtx, dues[0].no)
					record("timeout", other, err, time.Since(t0))
					dues = dues[1:] // a failed one is the reconciler's
				}
				done()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}

	time.Sleep(2 * time.Second)
	out, err := exec.Command("bash", sh, "pid", "3").Output()
	require.NoError(t, err, "pid of node 3")
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err)
	mu.Lock()
	opsBefore := ops
	down = true
	mu.Unlock()
	tKill := time.Now()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	time.Sleep(2 * time.Second) // the load goes on against a cluster of two
	tStart := time.Now()
	startOut, err := exec.Command("bash", sh, "start-node", "3").CombinedOutput()
	rejoin := time.Since(tStart)
	restarted = err == nil
	mu.Lock()
	down = false
	opsDown := ops - opsBefore
	mu.Unlock()
	if err != nil {
		stop()
		wg.Wait()
		t.Fatalf("node 3 did not rejoin: %v\n%s", err, startOut)
	}
	downFor := time.Since(tKill)
	time.Sleep(1500 * time.Millisecond) // and on, with node 3 back
	stop()
	wg.Wait()
	for _, cfg := range cfgs {
		size, state, err := wsrepState(cfg)
		require.NoError(t, err)
		require.Equal(t, 3, size, "node %s", cfg.Addr)
		require.Equal(t, "Synced", state, "node %s", cfg.Addr)
	}

	// The provider repeats the callbacks that got no answer.
	for _, pay := range unanswered {
		_, err := ws[0].Service.Pay(ctx, pay)
		if err == nil || errors.Is(err, cancel.ErrDiscrepancy) {
			answered[pay.PaymentID] = true
		} else {
			t.Errorf("repeated payment %s: %v", pay.PaymentID, err)
		}
	}
	time.Sleep(400 * time.Millisecond) // every deadline passed
	rep := settle(t, ctx, ws[0])
	violations := judge(t, ctx, dbs[0], ws, placed, answered)

	var classes []string
	total := 0
	for k, n := range failed {
		classes = append(classes, fmt.Sprintf("%s=%d", k, n))
		total += n
	}
	sort.Strings(classes)
	var paid, cancelled, missing int
	for _, p := range placed {
		o, err := ws[0].Store.Order(ctx, p.OrderNo)
		switch {
		case errors.Is(err, expiry.ErrNotFound):
			missing++
		case err != nil:
			t.Errorf("order %s: %v", p.OrderNo, err)
		case o.Status == expiry.StatusPaid:
			paid++
		case o.Status == expiry.StatusCancelled:
			cancelled++
		}
	}
	t.Logf("FIGURE galera node killed under load: %d operations (%d while node 3 was down, %v from SIGKILL to Synced again; start-node took %v: %s); orders %d placed: %d paid, %d cancelled, %d never committed; failed %d: %v; slowest successful call %v; payments repeated after %d; reconcile %+v; violations %d",
		ops, opsDown, downFor.Round(time.Millisecond), rejoin.Round(time.Millisecond), strings.TrimSpace(lastLine(string(startOut))),
		len(placed), paid, cancelled, missing, total, classes, maxLatency.Round(time.Millisecond), len(unanswered), rep, len(violations))
	for _, v := range violations {
		t.Error(v)
	}
	for k := range failed {
		if strings.Contains(k, "other:") {
			t.Errorf("an error of no known class: %s", k)
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
