package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/internal/testenv"
)

// summaryLine is the documented form of the last line: the seven fixed keys
// in order, then any number of further key=value pairs, single spaces.
var summaryLine = regexp.MustCompile(`^summary: placed=\d+ paid=\d+ cancelled=\d+ pending=\d+ seats_locked=\d+ seats_sold=\d+ discrepancies=\d+( [a-z_]+=\d+)*$`)

// runScenario runs the demo in-process and returns its summary numbers.
func runScenario(t *testing.T, cfg config) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	err := run(ctx, cfg, &out)
	var stderr bytes.Buffer
	code := exitCode(err, &stderr)
	text := out.String()
	if code != 0 || testing.Verbose() {
		t.Logf("output:\n%s", text)
	}
	require.NoError(t, err, "stderr: %s", stderr.String())
	require.Equal(t, 0, code)
	assert.Less(t, time.Since(start), 45*time.Second, "the demo must end on its own well within a minute")

	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	last := lines[len(lines)-1]
	require.Regexp(t, summaryLine, last, "the last line is the summary")
	nums := map[string]int{}
	for _, kv := range strings.Fields(strings.TrimPrefix(last, "summary: ")) {
		k, v, ok := strings.Cut(kv, "=")
		require.True(t, ok, kv)
		n, err := strconv.Atoi(v)
		require.NoError(t, err, kv)
		nums[k] = n
	}
	assert.NotContains(t, text, "FAIL")
	assert.NotContains(t, text, "VIOLATION")
	assert.Equal(t, 10, strings.Count(text, "\n  ok    "), "every check passed")
	return nums
}

// assertBalanced checks that the summary's numbers add up.
func assertBalanced(t *testing.T, cfg config, n map[string]int) {
	t.Helper()
	assert.Equal(t, cfg.Orders, n["placed"], "every order of the batch was placed")
	assert.Equal(t, n["placed"], n["paid"]+n["cancelled"], "placed == paid + cancelled")
	assert.Zero(t, n["pending"], "no order pending")
	assert.Zero(t, n["seats_locked"], "no seat locked")
	assert.Zero(t, n["violations"])
	assert.LessOrEqual(t, n["seats_sold"], 4*n["paid"], "at most 4 seats per paid order")
	assert.GreaterOrEqual(t, n["seats_sold"], n["paid"], "at least 1 seat per paid order")
	assert.GreaterOrEqual(t, n["discrepancies"], 1, "the payment after a cancel is a discrepancy")
	assert.Equal(t, n["placed"]-1+n["rearmed"], n["hops"], "a first message for every order but the lost one, then the re-arms")
	assert.GreaterOrEqual(t, n["by_reconciler"], 1, "the order whose message was lost")
	assert.GreaterOrEqual(t, n["seats_repaired"], 1, "the seats of the injected release failure were freed by the reconciler")
}

func TestScenarioEmbedded(t *testing.T) {
	t.Parallel()
	cfg := config{Orders: 12, Seed: 42}
	n := runScenario(t, cfg)
	assertBalanced(t, cfg, n)
	assert.Equal(t, 3, n["races"])
	assert.Equal(t, 2, n["rejected"])
	assert.Equal(t, 1, n["rolled_back"])
	assert.Equal(t, 1, n["bad_messages"])
}

// The same scenario on real servers, when the project's test command has
// started them (bash internal/testenv/test.sh exports these variables).
func TestScenarioRealServers(t *testing.T) {
	t.Parallel()
	mysqlDSN, pgDSN, redisAddr := os.Getenv("OE_MYSQL_DSN"), os.Getenv("OE_PG_DSN"), os.Getenv("OE_REDIS_ADDR")
	ns, broker := os.Getenv("OE_ROCKETMQ_NAMESRV"), os.Getenv("OE_ROCKETMQ_BROKER")
	if broker == "" {
		broker = "127.0.0.1:20911" // the test command's broker
	}
	for _, c := range []struct {
		name string
		cfg  config
		ok   bool
	}{
		{"mysql+redis", config{Orders: 12, MySQL: mysqlDSN, Redis: redisAddr}, mysqlDSN != "" && redisAddr != ""},
		{"postgres+redis", config{Orders: 12, Postgres: pgDSN, Redis: redisAddr}, pgDSN != "" && redisAddr != ""},
		{"mysql+redis+rocketmq-timer", config{Orders: 12, MySQL: mysqlDSN, Redis: redisAddr, RocketMQ: ns, Broker: broker, Mode: "timer"}, mysqlDSN != "" && redisAddr != "" && ns != ""},
		{"postgres+redis+rocketmq-levels", config{Orders: 12, Postgres: pgDSN, Redis: redisAddr, RocketMQ: ns, Broker: broker, Mode: "levels"}, pgDSN != "" && redisAddr != "" && ns != ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !c.ok {
				if testenv.Required() {
					t.Fatal("servers are required but OE_MYSQL_DSN / OE_PG_DSN / OE_REDIS_ADDR / OE_ROCKETMQ_NAMESRV are not all set")
				}
				t.Skip("OE_MYSQL_DSN / OE_PG_DSN / OE_REDIS_ADDR / OE_ROCKETMQ_NAMESRV not set (run bash internal/testenv/test.sh)")
			}
			// One after the other: runs on one database share its order
			// table, and a run's reconciler rightly cancels any expired
			// order in it, including another run's (whose seats live in
			// that run's Redis namespace).
			assertBalanced(t, c.cfg, runScenario(t, c.cfg))
		})
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want config
		err  string
	}{
		{args: nil, want: config{Orders: 40, Broker: "127.0.0.1:10911", Mode: "timer"}},
		{args: []string{"-orders", "7", "-seed", "3", "-redis", "127.0.0.1:6379"}, want: config{Orders: 7, Seed: 3, Redis: "127.0.0.1:6379", Broker: "127.0.0.1:10911", Mode: "timer"}},
		{args: []string{"-rocketmq", "ns:9876", "-rocketmq-broker", "b:10911", "-rocketmq-mode", "levels"}, want: config{Orders: 40, RocketMQ: "ns:9876", Broker: "b:10911", Mode: "levels"}},
		{args: []string{"-orders", "0"}, err: "-orders 0: want 1..5000"},
		{args: []string{"-orders", "x"}, err: `invalid value "x" for flag -orders`},
		{args: []string{"-mysql", "a", "-postgres", "b"}, err: "exclude each other"},
		{args: []string{"-nosuch"}, err: "flag provided but not defined"},
		{args: []string{"stray"}, err: `unexpected argument "stray"`},
	} {
		var stdout bytes.Buffer
		cfg, err := parseFlags(c.args, &stdout)
		if c.err != "" {
			require.ErrorContains(t, err, c.err, c.args)
			assert.Empty(t, stdout.String(), "errors print no usage")
			var stderr bytes.Buffer
			assert.Equal(t, 2, exitCode(&setupError{err}, &stderr))
			continue
		}
		require.NoError(t, err, c.args)
		assert.Equal(t, c.want, cfg)
	}

	var stdout bytes.Buffer
	_, err := parseFlags([]string{"-h"}, &stdout)
	require.ErrorIs(t, err, flag.ErrHelp)
	for _, f := range []string{"-orders", "-seed", "-mysql", "-postgres", "-redis", "-rocketmq"} {
		assert.Contains(t, stdout.String(), f)
	}
}

// Setup failures are one line on stderr and exit status 2, quickly.
func TestSetupFailures(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		cfg  config
		want string
	}{
		{"redis", config{Orders: 3, Redis: "127.0.0.1:1"}, "seatflow: Redis 127.0.0.1:1 does not answer: "},
		{"mysql", config{Orders: 3, MySQL: "oe:oe@tcp(127.0.0.1:1)/oe"}, "seatflow: MySQL/MariaDB 127.0.0.1:1/oe does not answer: "},
		{"postgres", config{Orders: 3, Postgres: "postgres://oe:secret@127.0.0.1:1/oe"}, "seatflow: PostgreSQL 127.0.0.1:1/oe does not answer: "},
		{"bad dsn", config{Orders: 3, MySQL: "garbage"}, "seatflow: -mysql: invalid DSN"},
		{"rocketmq", config{Orders: 3, RocketMQ: "127.0.0.1:1", Broker: "127.0.0.1:1", Mode: "timer"}, "seatflow: rocketmq: create topic"},
		{"rocketmq mode", config{Orders: 3, RocketMQ: "127.0.0.1:1", Mode: "fast"}, "seatflow: -rocketmq-mode: rocketmq: unknown mode"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			var out, stderr bytes.Buffer
			err := run(context.Background(), c.cfg, &out)
			require.Error(t, err)
			assert.Equal(t, 2, exitCode(err, &stderr))
			assert.True(t, strings.HasPrefix(stderr.String(), c.want), stderr.String())
			assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %q", stderr.String())
			assert.NotContains(t, stderr.String(), "secret")
			assert.Empty(t, out.String())
			assert.Less(t, time.Since(start), 10*time.Second)
		})
	}
}

func TestExitCodes(t *testing.T) {
	var stderr bytes.Buffer
	assert.Equal(t, 0, exitCode(nil, &stderr))
	assert.Equal(t, 1, exitCode(errViolations, &stderr))
	assert.Empty(t, stderr.String(), "violations are listed above the summary, which stays last")
	assert.Equal(t, 1, exitCode(context.Canceled, &stderr))
	assert.Equal(t, "seatflow: context canceled\n", stderr.String())
}
