package e2e_test

// Crash tests: a real child process (this test binary, re-executed with
// -test.run=^TestCrashChild$) does one step of the flow on MariaDB and Redis
// and is killed with SIGKILL at the worst moment; the parent then checks what
// the crash left behind and that one reconcile round repairs it.
//
//   - release: the child's cancel transaction has committed and the child is
//     inside the seat release. Left behind: the order cancelled in SQL, its
//     seats still locked in Redis. One round releases them, exactly once.
//   - send: the child's placing transaction has committed and the child is
//     inside the delayed send. Left behind: a pending order no message will
//     ever expire. Once it is due, one round cancels it and frees its seats.

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// What the parent tells the child, through its environment. OE_REDIS_ADDR is
// inherited as is.
const (
	crashEnvScenario = "OE_CRASH_SCENARIO" // "release" or "send"; unset: not a child
	crashEnvDSN      = "OE_CRASH_MYSQL_DSN"
	crashEnvNS       = "OE_CRASH_NAMESPACE"
	crashEnvShow     = "OE_CRASH_SHOW"
	crashEnvOrder    = "OE_CRASH_ORDER"
	crashEnvUser     = "OE_CRASH_USER"
	crashEnvSeats    = "OE_CRASH_SEATS" // comma-separated
	crashMarker      = "OE-CRASH-POINT"
)

// TestCrashChild is the child's side. It does nothing in a normal run.
func TestCrashChild(t *testing.T) {
	scenario := os.Getenv(crashEnvScenario)
	if scenario == "" {
		t.Skip("not a crash child: TestCrashRelease and TestCrashSend run this test in a child process and kill it")
	}
	ctx := context.Background()
	db, err := sql.Open("mysql", os.Getenv(crashEnvDSN))
	require.NoError(t, err)
	defer db.Close()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(testenv.EnvRedis)})
	defer rdb.Close()
	store, err := sqlstore.New(db, sqlstore.MySQL)
	require.NoError(t, err)
	seats, err := redisseat.New(rdb, os.Getenv(crashEnvNS))
	require.NoError(t, err)
	no, user, show := os.Getenv(crashEnvOrder), os.Getenv(crashEnvUser), os.Getenv(crashEnvShow)

	switch scenario {
	case "release":
		svc, err := cancel.New(cancel.Config{Store: store, Seats: crashingReleaser{seats}})
		require.NoError(t, err)
		res, err := svc.UserCancel(ctx, no, user)
		t.Fatalf("the parent should have killed this process inside the seat release; the cancel returned %+v, %v", res, err)
	case "send":
		sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: crashingSender{}, SendTimeout: time.Hour})
		require.NoError(t, err)
		now, err := store.Now(ctx)
		require.NoError(t, err)
		p := cancel.Placement{OrderNo: no, UserID: user, ShowID: show, Seats: strings.Split(os.Getenv(crashEnvSeats), ","), ExpireAt: now.Add(time.Second)}
		svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Scheduler: sched})
		require.NoError(t, err)
		err = svc.Place(ctx, p, store.Insert(db, nil))
		t.Fatalf("the parent should have killed this process inside the delayed send; Place returned %v", err)
	default:
		t.Fatalf("unknown crash scenario %q", scenario)
	}
}

// crashingReleaser announces that the cancel has committed and the release
// has begun, then waits to be killed.
type crashingReleaser struct{ *redisseat.Seats }

func (crashingReleaser) Release(_ context.Context, h cancel.Hold) (int, error) {
	fmt.Printf("%s release %s %s\n", crashMarker, h.OrderNo, strings.Join(h.Seats, ","))
	time.Sleep(2 * time.Minute)
	return 0, errors.New("not killed")
}

// crashingSender announces that the order has committed and its message is
// being sent, then waits to be killed.
type crashingSender struct{}

func (crashingSender) Send(_ context.Context, m expiry.Message, _ time.Duration) error {
	fmt.Printf("%s send %s\n", crashMarker, m.OrderNo)
	time.Sleep(2 * time.Minute)
	return errors.New("not killed")
}

// crashEnv is the parent's side: a fresh MariaDB database, a Redis namespace,
// and the library wired on them.
type crashEnv struct {
	db       *sql.DB
	dsn      string
	rdb      *redis.Client
	ns, show string
	store    *sqlstore.Store
	seats    *redisseat.Seats
	released *releaseCounter
	svc      *cancel.Service
	rec      reconcile.Config
}

// crashSettle is the crash tests' reconcile.Config.Settle: far longer than a
// round right after the kill takes, short enough to wait out.
const crashSettle = 3 * time.Second

func newCrashEnv(t *testing.T) *crashEnv {
	ctx := context.Background()
	e := &crashEnv{db: testenv.MySQL(t), rdb: testenv.Redis(t), ns: "oe-crash-" + testenv.Unique(), show: "show1"}
	// testenv made a database for this test; the child needs its DSN.
	var name string
	require.NoError(t, e.db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&name))
	cfg, err := mysql.ParseDSN(os.Getenv(testenv.EnvMySQL))
	require.NoError(t, err)
	cfg.DBName = name
	e.dsn = cfg.FormatDSN()
	e.store, err = sqlstore.New(e.db, sqlstore.MySQL)
	require.NoError(t, err)
	require.NoError(t, e.store.Migrate(ctx))
	e.seats, err = redisseat.New(e.rdb, e.ns)
	require.NoError(t, err)
	t.Cleanup(func() {
		e.rdb.Del(context.Background(), e.ns+":{"+e.show+"}:seats", e.ns+":{"+e.show+"}:limit", e.ns+":shows")
	})
	e.released = &releaseCounter{Seats: e.seats, n: map[string]int{}}
	var err2 error
	e.svc, err2 = cancel.New(cancel.Config{Store: e.store, Seats: e.released})
	require.NoError(t, err2)
	e.rec = reconcile.Config{Orders: e.store, Seats: e.released, Service: e.svc, Batch: 100, Grace: time.Minute, Settle: crashSettle, Runtime: expiry.Runtime{Logger: secQuiet()}}
	return e
}

// place places an order as a host does: seats locked, then the order inserted.
func (e *crashEnv) place(t *testing.T, p cancel.Placement) {
	require.NoError(t, e.svc.Place(context.Background(), p, e.store.Insert(e.db, nil)))
}

// releaseCounter counts the seats each order really had freed.
type releaseCounter struct {
	*redisseat.Seats
	mu sync.Mutex
	n  map[string]int
}

func (r *releaseCounter) Release(ctx context.Context, h cancel.Hold) (int, error) {
	n, err := r.Seats.Release(ctx, h)
	r.mu.Lock()
	r.n[h.OrderNo] += n
	r.mu.Unlock()
	return n, err
}

// ReleaseAll counts a batch's release per hold, as Release.
func (r *releaseCounter) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	ns, err := r.Seats.ReleaseAll(ctx, holds)
	r.mu.Lock()
	for i, n := range ns {
		r.n[holds[i].OrderNo] += max(n, 0) // -1: its show's step failed
	}
	r.mu.Unlock()
	return ns, err
}

func (r *releaseCounter) of(no string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[no]
}

// runAndKill starts the child for scenario, waits for its marker line, kills
// it with SIGKILL and checks that SIGKILL is what ended it. It returns the
// marker line.
func (e *crashEnv) runAndKill(t *testing.T, scenario string, p cancel.Placement) string {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1", "-test.timeout=3m")
	cmd.Env = append(os.Environ(),
		crashEnvScenario+"="+scenario, crashEnvDSN+"="+e.dsn, crashEnvNS+"="+e.ns, crashEnvShow+"="+p.ShowID,
		crashEnvOrder+"="+p.OrderNo, crashEnvUser+"="+p.UserID, crashEnvSeats+"="+strings.Join(p.Seats, ","))
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var output []string
	drainAndWait := func() error {
		for l := range lines {
			output = append(output, l)
		}
		return cmd.Wait()
	}
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				err := cmd.Wait()
				t.Fatalf("the child ended (%v) before reaching the crash point:\nstdout:\n%s\nstderr:\n%s", err, strings.Join(output, "\n"), stderr.String())
			}
			output = append(output, l)
			if !strings.HasPrefix(l, crashMarker+" "+scenario+" ") {
				continue
			}
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			err := drainAndWait()
			ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
			require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the child must die of SIGKILL, it ended with %v", err)
			return l
		case <-timeout:
			_ = cmd.Process.Kill()
			_ = drainAndWait()
			t.Fatalf("no crash point from the child within 60s:\nstdout:\n%s\nstderr:\n%s", strings.Join(output, "\n"), stderr.String())
		}
	}
}

func (e *crashEnv) status(t *testing.T, no string) (expiry.Status, string) {
	var st uint8
	var reason sql.NullString
	require.NoError(t, e.db.QueryRowContext(context.Background(), "SELECT status, cancel_reason FROM oe_order WHERE order_no = ?", no).Scan(&st, &reason))
	return expiry.Status(st), reason.String
}

func (e *crashEnv) seatState(t *testing.T) map[string]cancel.SeatState {
	st, err := e.seats.Show(context.Background(), e.show)
	require.NoError(t, err)
	return st
}

func (e *crashEnv) held(t *testing.T, user string) int {
	n, err := e.seats.Held(context.Background(), e.show, user)
	require.NoError(t, err)
	return n
}

func TestCrashRelease(t *testing.T) {
	ctx := context.Background()
	e := newCrashEnv(t)
	now, err := e.store.Now(ctx)
	require.NoError(t, err)
	// The victim, and two orders of the same user that must survive the
	// repair untouched: one pending, one paid.
	victim := cancel.Placement{OrderNo: "crash-a", UserID: "u1", ShowID: e.show, Seats: []string{"a1", "a2", "a3"}, ExpireAt: now.Add(time.Hour)}
	pending := cancel.Placement{OrderNo: "crash-b", UserID: "u1", ShowID: e.show, Seats: []string{"b1", "b2"}, ExpireAt: now.Add(time.Hour)}
	paid := cancel.Placement{OrderNo: "crash-c", UserID: "u1", ShowID: e.show, Seats: []string{"c1"}, ExpireAt: now.Add(time.Hour)}
	for _, p := range []cancel.Placement{victim, pending, paid} {
		e.place(t, p)
	}
	_, err = e.svc.Pay(ctx, cancel.Payment{OrderNo: paid.OrderNo, UserID: paid.UserID, PaymentID: "pay-c"})
	require.NoError(t, err)
	require.Equal(t, 6, e.held(t, "u1"))

	marker := e.runAndKill(t, "release", victim)
	assert.Equal(t, crashMarker+" release crash-a a1,a2,a3", marker, "the child was inside the release of the victim's seats")

	// What the crash left: cancelled in SQL, still locked in Redis.
	st, reason := e.status(t, victim.OrderNo)
	require.Equal(t, expiry.StatusCancelled, st, "the cancel transaction committed before the release")
	assert.Equal(t, string(cancel.ReasonUser), reason)
	seats := e.seatState(t)
	for _, s := range victim.Seats {
		require.Equal(t, victim.OrderNo, seats[s].OrderNo, "seat %s is still locked by the cancelled order", s)
		require.Equal(t, cancel.SeatLocked, seats[s].Status)
	}
	require.Equal(t, 6, e.held(t, "u1"), "the counter still counts the victim's seats (I8 lags until the repair)")

	// Another instance's round right after the crash leaves the locks to
	// the canceller (it cannot tell a crash from a release under way); the
	// first round after the settle time, by the database's clock, releases
	// them, exactly once; a second releases nothing.
	rec, err := reconcile.New(e.rec)
	require.NoError(t, err)
	rep0, err := rec.Round(ctx)
	require.NoError(t, err)
	assert.Zero(t, rep0.Released, "within the settle time of the cancel's commit")
	assert.Equal(t, len(victim.Seats), rep0.Settling)
	time.Sleep(crashSettle)
	rep1, err := rec.Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, len(victim.Seats), rep1.Released)
	assert.Zero(t, rep1.Expired)
	rep2, err := rec.Round(ctx)
	require.NoError(t, err)
	assert.Zero(t, rep2.Released+rep2.Expired+rep2.Sold, "a second round has nothing to do: %+v", rep2)

	// I2: the victim's seats released once each, nobody else's; I8.
	assert.Equal(t, len(victim.Seats), e.released.of(victim.OrderNo))
	assert.Zero(t, e.released.of(pending.OrderNo))
	assert.Zero(t, e.released.of(paid.OrderNo))
	seats = e.seatState(t)
	for _, s := range victim.Seats {
		assert.NotContains(t, seats, s)
	}
	for _, s := range pending.Seats {
		assert.Equal(t, cancel.SeatState{Status: cancel.SeatLocked, OrderNo: pending.OrderNo, UserID: "u1", LockedAt: seats[s].LockedAt, LockID: seats[s].LockID}, seats[s])
	}
	assert.Equal(t, cancel.SeatState{Status: cancel.SeatSold, OrderNo: paid.OrderNo, UserID: "u1"}, seats["c1"])
	assert.Equal(t, len(pending.Seats)+len(paid.Seats), e.held(t, "u1"), "I8: counter == seats of pending and paid orders")
	st, _ = e.status(t, pending.OrderNo)
	assert.Equal(t, expiry.StatusPending, st)
	st, _ = e.status(t, paid.OrderNo)
	assert.Equal(t, expiry.StatusPaid, st)
	t.Logf("FIGURE crash release: kills=1 repaired_orders=1 seats_left_within_settle_round0=%d seats_released_round1=%d seats_released_round2=%d other_orders_touched=0", rep0.Settling, rep1.Released, rep2.Released)
}

func TestCrashSend(t *testing.T) {
	ctx := context.Background()
	e := newCrashEnv(t)
	now, err := e.store.Now(ctx)
	require.NoError(t, err)
	other := cancel.Placement{OrderNo: "crash-other", UserID: "u1", ShowID: e.show, Seats: []string{"o1"}, ExpireAt: now.Add(time.Hour)}
	e.place(t, other)
	victim := cancel.Placement{OrderNo: "crash-sent", UserID: "u1", ShowID: e.show, Seats: []string{"v1", "v2"}}

	marker := e.runAndKill(t, "send", victim)
	assert.Equal(t, crashMarker+" send crash-sent", marker)

	// What the crash left: a pending order, seats locked, no message.
	o, err := e.store.Order(ctx, victim.OrderNo)
	require.NoError(t, err, "the placing transaction committed before the send")
	require.Equal(t, expiry.StatusPending, o.Status)
	seats := e.seatState(t)
	for _, s := range victim.Seats {
		require.Equal(t, victim.OrderNo, seats[s].OrderNo)
	}
	require.Equal(t, 3, e.held(t, "u1"))

	rec, err := reconcile.New(e.rec)
	require.NoError(t, err)
	// Before it is due, a round leaves it alone (I4).
	if o.Remaining() > 200*time.Millisecond {
		rep, err := rec.Round(ctx)
		require.NoError(t, err)
		require.Zero(t, rep.Expired+rep.Released, "not due yet: %+v", rep)
	}
	// Once due by the database's clock, one round cancels it.
	for {
		now, err := e.store.Now(ctx)
		require.NoError(t, err)
		if !now.Before(o.ExpireAt) {
			break
		}
		time.Sleep(min(o.ExpireAt.Sub(now)+5*time.Millisecond, 100*time.Millisecond))
	}
	rep1, err := rec.Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, rep1.Expired)
	rep2, err := rec.Round(ctx)
	require.NoError(t, err)
	assert.Zero(t, rep2.Released+rep2.Expired+rep2.Sold, "a second round has nothing to do: %+v", rep2)

	st, reason := e.status(t, victim.OrderNo)
	assert.Equal(t, expiry.StatusCancelled, st)
	assert.Equal(t, string(cancel.ReasonReconcile), reason)
	assert.Equal(t, len(victim.Seats), e.released.of(victim.OrderNo))
	assert.Zero(t, e.released.of(other.OrderNo))
	seats = e.seatState(t)
	for _, s := range victim.Seats {
		assert.NotContains(t, seats, s)
	}
	assert.Equal(t, other.OrderNo, seats["o1"].OrderNo)
	assert.Equal(t, 1, e.held(t, "u1"), "I8")
	t.Logf("FIGURE crash send: kills=1 repaired_orders=%d seats_released=%d second_round_actions=%d", rep1.Expired, e.released.of(victim.OrderNo), rep2.Released+rep2.Expired+rep2.Sold)
}
