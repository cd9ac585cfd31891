package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// harness is the service on its default embedded infrastructure (SQLite
// file, miniredis, in-process sender with RocketMQ's levels), served by
// httptest, with the reconciler running.
type harness struct {
	t   *testing.T
	srv *httptest.Server
	app *App

	mu      sync.Mutex
	refunds []string
	warned  map[string]int // order → warning hook calls
}

func newHarness(t *testing.T, window time.Duration) *harness {
	t.Helper()
	ctx, cancelCtx := context.WithCancel(context.Background())
	cfg := config{Expiry: window, Limit: 6, Reconcile: 500 * time.Millisecond}
	tr, err := newTransport(cfg)
	require.NoError(t, err)
	e, err := openEnv(ctx, cfg)
	require.NoError(t, err)
	h := &harness{t: t, warned: map[string]int{}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	app, shell, err := New(ctx, Config{DB: e.db, Dialect: e.dialect, Redis: e.rdb, Sender: tr.sender,
		Expiry: cfg.Expiry, Limit: cfg.Limit, ReconcileEvery: cfg.Reconcile, Logger: logger,
		OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) error {
			h.mu.Lock()
			h.refunds = append(h.refunds, d.OrderNo+" "+d.PaymentID)
			h.mu.Unlock()
			return nil
		},
		WarnBefore: (window / 2).Truncate(time.Millisecond),
		OnWarning: func(_ context.Context, o expiry.Order) error {
			h.mu.Lock()
			h.warned[o.No]++
			h.mu.Unlock()
			return nil
		}})
	require.NoError(t, err)
	require.NoError(t, tr.attach(shell))
	h.app = app
	// The seat store is fresh, so it has no "restored" marker and the first
	// reconcile round rebuilds it from SQL. Run that round here, before the
	// test acts: a rebuild that reads an order's claims just before a cancel
	// restores its seats just after it, and its re-check frees them again a
	// moment later; a test reading in between sees them locked (and a new
	// order for them refused). Later rounds only release and sell.
	_, err = app.rec.Round(ctx)
	require.NoError(t, err, "the first reconcile round (the rebuild of the fresh seat store)")
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := app.RunReconciler(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("the reconciler stopped: %v", err)
		}
	})
	h.srv = httptest.NewServer(app.Handler())
	t.Cleanup(func() {
		h.srv.Close()
		cancelCtx()
		wg.Wait()
		assert.NoError(t, tr.close())
		assert.NoError(t, e.close())
	})
	return h
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// do sends a request and decodes the JSON answer.
func (h *harness) do(method, path, user, body string) (int, map[string]any) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, strings.NewReader(body))
	require.NoError(h.t, err)
	if user != "" {
		req.Header.Set("X-User", user)
	}
	resp, err := h.srv.Client().Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	var out map[string]any
	raw, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	if len(raw) > 0 {
		require.NoError(h.t, json.Unmarshal(raw, &out), "body %q", raw)
		require.Equal(h.t, "application/json", resp.Header.Get("Content-Type"))
	}
	return resp.StatusCode, out
}

// place places an order and returns its number.
func (h *harness) place(user, show string, seats ...string) string {
	h.t.Helper()
	body, err := json.Marshal(placeRequest{ShowID: show, Seats: seats})
	require.NoError(h.t, err)
	code, out := h.do("POST", "/orders", user, string(body))
	require.Equal(h.t, http.StatusCreated, code, out)
	require.Equal(h.t, "pending", out["status"])
	require.Equal(h.t, user, out["user_id"])
	return out["order_no"].(string)
}

// pay sends the payment callback for order no with the provider's payment id.
func (h *harness) pay(no, paymentID string) (int, map[string]any) {
	h.t.Helper()
	body, err := json.Marshal(payRequest{PaymentID: paymentID})
	require.NoError(h.t, err)
	return h.do("POST", "/orders/"+no+"/pay", "", string(body))
}

// seatStates returns the seats of show in Redis: "locked:<order>" or "sold:<order>".
func (h *harness) seatStates(show string) map[string]string {
	h.t.Helper()
	seats, err := h.app.seats.Show(context.Background(), show)
	require.NoError(h.t, err)
	out := map[string]string{}
	for id, s := range seats {
		state := "locked:"
		if s.Status == cancel.SeatSold {
			state = "sold:"
		}
		out[id] = state + s.OrderNo
	}
	return out
}

func (h *harness) refunded() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.refunds...)
}

func (h *harness) warnings(no string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.warned[no]
}

// waitStatus waits up to 10s for order no of user to leave pending.
func (h *harness) waitStatus(no, user string) string {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		code, out := h.do("GET", "/orders/"+no, user, "")
		require.Equal(h.t, http.StatusOK, code)
		if st := out["status"].(string); st != "pending" {
			return st
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "pending"
}

func (h *harness) held(show, user string) int {
	h.t.Helper()
	n, err := h.app.seats.Held(context.Background(), show, user)
	require.NoError(h.t, err)
	return n
}

func (h *harness) countOrders() int {
	h.t.Helper()
	var n int
	require.NoError(h.t, h.app.db.QueryRow("SELECT COUNT(*) FROM oe_order").Scan(&n))
	return n
}

func TestPlaceThenPay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, time.Minute)
	no := h.place("alice", "show1", "A1", "A2")
	assert.Equal(t, map[string]string{"A1": "locked:" + no, "A2": "locked:" + no}, h.seatStates("show1"))
	assert.Equal(t, 2, h.held("show1", "alice"))

	code, out := h.pay(no, "pay-1")
	require.Equal(t, http.StatusOK, code, out)
	assert.Equal(t, "paid", out["status"])
	assert.Equal(t, "pay-1", out["payment_id"])
	assert.Equal(t, map[string]string{"A1": "sold:" + no, "A2": "sold:" + no}, h.seatStates("show1"))
	assert.Equal(t, 2, h.held("show1", "alice"), "sold seats still count against the limit")

	code, out = h.pay(no, "pay-1")
	assert.Equal(t, http.StatusOK, code, "a repeated callback changes nothing: %v", out)
	assert.Equal(t, "pay-1", out["payment_id"])
	assert.Empty(t, h.refunded())

	// A second payment for the paid order: 409, refunded once however often
	// the provider repeats it.
	for range 2 {
		code, out = h.pay(no, "pay-2")
		assert.Equal(t, http.StatusConflict, code, out)
		assert.Contains(t, out["error"], "refunded")
	}
	assert.Equal(t, []string{no + " pay-2"}, h.refunded())
	code, out = h.do("GET", "/orders/"+no, "alice", "")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "paid", out["status"])
	code, _ = h.do("POST", "/orders/"+no+"/cancel", "alice", "")
	assert.Equal(t, http.StatusConflict, code, "a paid order cannot be cancelled")
	assert.Equal(t, map[string]string{"A1": "sold:" + no, "A2": "sold:" + no}, h.seatStates("show1"))
	assert.Equal(t, []string{no + " pay-2"}, h.refunded())
}

func TestOnlyTheOwnerCancels(t *testing.T) {
	t.Parallel()
	h := newHarness(t, time.Minute)
	no := h.place("alice", "show1", "B1", "B2", "B3")

	code, out := h.do("POST", "/orders/"+no+"/cancel", "mallory", "")
	assert.Equal(t, http.StatusNotFound, code, "another user's order is not found: %v", out)
	code, _ = h.do("GET", "/orders/"+no, "mallory", "")
	assert.Equal(t, http.StatusNotFound, code)
	code, out = h.do("GET", "/orders/"+no, "alice", "")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "pending", out["status"], "untouched")
	assert.Len(t, h.seatStates("show1"), 3)

	code, out = h.do("POST", "/orders/"+no+"/cancel", "alice", "")
	require.Equal(t, http.StatusOK, code, out)
	assert.Equal(t, "cancelled", out["status"])
	assert.Empty(t, h.seatStates("show1"), "seats free")
	assert.Zero(t, h.held("show1", "alice"))

	code, out = h.do("POST", "/orders/"+no+"/cancel", "alice", "")
	assert.Equal(t, http.StatusOK, code, "cancelling again is idempotent")
	assert.Equal(t, "cancelled", out["status"])
	h.place("bob", "show1", "B1") // the seat can be sold again
}

func TestUnpaidOrderExpires(t *testing.T) {
	t.Parallel()
	h := newHarness(t, time.Second)
	no := h.place("alice", "show1", "C1", "C2")
	other := h.place("bob", "show1", "C3")
	code, _ := h.pay(other, "pay-1")
	require.Equal(t, http.StatusOK, code)

	deadline := time.Now().Add(10 * time.Second) // 1s window, 1s first level, a re-arm, a reconcile round
	status := ""
	for time.Now().Before(deadline) {
		code, out := h.do("GET", "/orders/"+no, "alice", "")
		require.Equal(t, http.StatusOK, code)
		if status = out["status"].(string); status != "pending" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, "cancelled", status, "the order expired within 10s")
	// The seats go back after the cancel's commit (the second boundary), so
	// a reader may see "cancelled" a moment before the seats are free.
	want := map[string]string{"C3": "sold:" + other}
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(want, h.seatStates("show1")) }, 5*time.Second, 20*time.Millisecond,
		"the expired order's seats are free, the paid one's sold: %v", h.seatStates("show1"))
	assert.Zero(t, h.held("show1", "alice"))
	assert.Equal(t, 1, h.held("show1", "bob"))
	_, out := h.do("GET", "/orders/"+other, "bob", "")
	assert.Equal(t, "paid", out["status"], "a paid order never expires")

	// What happened is on /metrics: one order paid with one seat, one
	// cancelled with two (by its message or, if that was slow, the reconciler).
	metrics := h.metrics()
	assert.Contains(t, metrics, `orderexpiry_events_total{detail="",kind="paid"} 1`)
	assert.Contains(t, metrics, `orderexpiry_seats_total{kind="paid"} 1`)
	assert.Contains(t, metrics, `orderexpiry_seats_total{kind="cancelled"} 2`)
	assert.Regexp(t, `orderexpiry_events_total\{detail="(timeout|reconcile)",kind="cancelled"\} 1`, metrics)
	// The operator's view: the cancel's lateness by the database's clock,
	// and which path caught the order (the two counters add up to it).
	assert.Regexp(t, `orderexpiry_cancel_lateness_seconds_count\{reason="(timeout|reconcile)"\} 1\n`, metrics)
	byMessage := regexp.MustCompile(`orderexpiry_expired_orders_total\{path="message"\} (\d+)`).FindStringSubmatch(metrics)
	byReconciler := regexp.MustCompile(`orderexpiry_expired_orders_total\{path="reconciler"\} (\d+)`).FindStringSubmatch(metrics)
	require.Len(t, byMessage, 2, metrics)
	require.Len(t, byReconciler, 2, metrics)
	assert.ElementsMatch(t, []string{"0", "1"}, []string{byMessage[1], byReconciler[1]}, "caught once, by one path")
	// The overdue gauges are read from the database from the start.
	assert.Regexp(t, `orderexpiry_overdue_orders \d+\n`, metrics)
	assert.Regexp(t, `orderexpiry_overdue_oldest_seconds [0-9.e+-]+\n`, metrics)
	assert.Regexp(t, `orderexpiry_overdue_last_poll_timestamp_seconds [0-9.e+]+\n`, metrics)
	assert.Contains(t, metrics, `orderexpiry_overdue_poll_errors_total 0`)
}

// metrics returns the service's GET /metrics.
func (h *harness) metrics() string {
	resp, err := h.srv.Client().Get(h.srv.URL + "/metrics")
	require.NoError(h.t, err)
	defer resp.Body.Close()
	require.Equal(h.t, http.StatusOK, resp.StatusCode)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	return string(raw)
}

func TestPaymentAfterCancel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, time.Minute)
	no := h.place("alice", "show1", "D1")
	code, _ := h.do("POST", "/orders/"+no+"/cancel", "alice", "")
	require.Equal(t, http.StatusOK, code)

	for range 3 { // the provider retries a callback answered 409
		code, out := h.pay(no, "pay-1")
		assert.Equal(t, http.StatusConflict, code, out)
		assert.Contains(t, out["error"], "refunded")
	}
	assert.Equal(t, []string{no + " pay-1"}, h.refunded(), "the refund hook was called once for the payment")
	metrics := h.metrics()
	assert.Contains(t, metrics, `orderexpiry_discrepancies_total{reason="paid_after_cancelled"} 1`, "once per payment id")
	assert.Contains(t, metrics, `orderexpiry_refunds_total{result="refunded"} 1`)
	assert.Contains(t, metrics, `orderexpiry_refunds_total{result="hook_failed"} 0`)
	_, out := h.do("GET", "/orders/"+no, "alice", "")
	assert.Equal(t, "cancelled", out["status"])
	assert.Empty(t, h.seatStates("show1"), "nothing sold")
	assert.Zero(t, h.held("show1", "alice"))
}

func TestSeatTakenAndLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, time.Minute)
	no := h.place("alice", "show1", "E1")

	code, out := h.do("POST", "/orders", "bob", `{"show_id":"show1","seats":["E2","E1"]}`)
	assert.Equal(t, http.StatusConflict, code, out)
	code, out = h.do("POST", "/orders", "carol", `{"show_id":"show1","seats":["F1","F2","F3","F4","F5","F6","F7"]}`)
	assert.Equal(t, http.StatusTooManyRequests, code, out)
	assert.Equal(t, map[string]string{"E1": "locked:" + no}, h.seatStates("show1"), "nothing locked by the rejected orders")
	assert.Zero(t, h.held("show1", "bob"))
	assert.Zero(t, h.held("show1", "carol"))
	assert.Equal(t, 1, h.countOrders())
}

// An order number placed already (a retry after an unknown commit, a double
// submit) is refused, 409, before any seat is locked, and the live order
// keeps its seats.
func TestOrderNumberPlacedAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, time.Minute)
	ctx := context.Background()
	p := cancel.Placement{OrderNo: "o-again", UserID: "alice", ShowID: "show1", Seats: []string{"H1", "H2"},
		ExpireAt: time.Now().Add(time.Minute).Truncate(time.Millisecond)}
	require.NoError(t, h.app.Place(ctx, p))
	live := map[string]string{"H1": "locked:o-again", "H2": "locked:o-again"}

	err := h.app.Place(ctx, p) // a double submit
	assert.ErrorIs(t, err, cancel.ErrOrderExists)
	other := p
	other.Seats = []string{"H3"} // the same number on a free seat
	err = h.app.Place(ctx, other)
	assert.ErrorIs(t, err, cancel.ErrOrderExists)
	rec := httptest.NewRecorder()
	h.app.fail(rec, httptest.NewRequest("POST", "/orders", nil), err)
	assert.Equal(t, http.StatusConflict, rec.Code, rec.Body.String())

	assert.Equal(t, live, h.seatStates("show1"), "the live order keeps its seats, H3 stays free")
	assert.Equal(t, 2, h.held("show1", "alice"))
	assert.Equal(t, 1, h.countOrders())
	code, out := h.do("GET", "/orders/o-again", "alice", "")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "pending", out["status"])
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, time.Minute)
	no := h.place("alice", "show1", "G1")
	before := h.seatStates("show1")
	long := strings.Repeat("x", expiry.MaxIDLen+1)

	for _, c := range []struct {
		method, path, user, body string
		want                     int
	}{
		{"POST", "/orders", "bob", `{"show_id":`, http.StatusBadRequest},                           // malformed JSON
		{"POST", "/orders", "bob", `{"show_id":"show1","seats":["G2"]} {}`, http.StatusBadRequest}, // two values
		{"POST", "/orders", "bob", `{"show_id":"show1","seats":["G2"],"price":0}`, http.StatusBadRequest},
		{"POST", "/orders", "bob", `{"show_id":"show1","seats":"G2"}`, http.StatusBadRequest},
		{"POST", "/orders", "bob", `{"show_id":"a{b}","seats":["G2"]}`, http.StatusBadRequest}, // a Redis hash tag
		{"POST", "/orders", "bob", `{"show_id":"show1","seats":["G|2"]}`, http.StatusBadRequest},
		{"POST", "/orders", "bob", `{"show_id":"show1","seats":["G2","G2"]}`, http.StatusBadRequest},
		{"POST", "/orders", "bob", `{"show_id":"show1","seats":[]}`, http.StatusBadRequest},
		{"POST", "/orders", "bob", `{"show_id":"` + long + `","seats":["G2"]}`, http.StatusBadRequest},
		{"POST", "/orders", "a{b}", `{"show_id":"show1","seats":["G2"]}`, http.StatusBadRequest},
		{"POST", "/orders", "", `{"show_id":"show1","seats":["G2"]}`, http.StatusUnauthorized},
		{"POST", "/orders/a{b}/pay", "", `{"payment_id":"p1"}`, http.StatusBadRequest},
		{"POST", "/orders/a%7Bb%7D/pay", "", `{"payment_id":"p1"}`, http.StatusBadRequest},
		{"POST", "/orders/a%2Fb/pay", "", `{"payment_id":"p1"}`, http.StatusBadRequest},
		{"POST", "/orders/" + long + "/pay", "", `{"payment_id":"p1"}`, http.StatusBadRequest},
		{"POST", "/orders/" + no + "/pay", "", "", http.StatusBadRequest},                      // no body
		{"POST", "/orders/" + no + "/pay", "", `{}`, http.StatusBadRequest},                    // no payment id
		{"POST", "/orders/" + no + "/pay", "", `{"payment_id":"p{1}"}`, http.StatusBadRequest}, // a Redis hash tag
		{"POST", "/orders/" + no + "/pay", "", `{"payment_id":"` + long + `"}`, http.StatusBadRequest},
		{"POST", "/orders/" + no + "/pay", "", `{"payment_id":"p1","amount":1}`, http.StatusBadRequest},
		{"POST", "/orders/a%20b/cancel", "alice", "", http.StatusBadRequest},
		{"POST", "/orders/" + no + "/cancel", "a{b}", "", http.StatusBadRequest},
		{"POST", "/orders/" + no + "/cancel", "", "", http.StatusUnauthorized},
		{"GET", "/orders/%00", "alice", "", http.StatusBadRequest},
		{"GET", "/orders/a%27%20OR%201%3D1", "alice", "", http.StatusBadRequest},
		// A payment the provider took for a number no order has: refunded,
		// never a not-found the provider repeats for ever.
		{"POST", "/orders/o-NOSUCHORDER/pay", "", `{"payment_id":"p1"}`, http.StatusConflict},
		{"POST", "/orders/o-NOSUCHORDER/cancel", "alice", "", http.StatusNotFound},
		{"GET", "/orders/o-NOSUCHORDER", "alice", "", http.StatusNotFound},
		{"DELETE", "/orders/" + no, "alice", "", http.StatusMethodNotAllowed},
	} {
		req, err := http.NewRequest(c.method, h.srv.URL+c.path, strings.NewReader(c.body))
		require.NoError(t, err)
		if c.user != "" {
			req.Header.Set("X-User", c.user)
		}
		resp, err := h.srv.Client().Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, c.want, resp.StatusCode, "%s %s (user %q) %s → %s", c.method, c.path, c.user, c.body, body)
	}

	assert.Equal(t, 1, h.countOrders(), "no order was added")
	assert.Equal(t, before, h.seatStates("show1"), "no seat changed")
	assert.Equal(t, 1, h.held("show1", "alice"))
	assert.Zero(t, h.held("show1", "bob"))
	_, out := h.do("GET", "/orders/"+no, "alice", "")
	assert.Equal(t, "pending", out["status"])
	assert.Equal(t, []string{"o-NOSUCHORDER p1"}, h.refunded(), "the one payment no order could take, refunded once")
}

// serve, as main runs it, stops cleanly when its context is cancelled.
func TestServeStopsOnCancel(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancelCtx := context.WithCancel(context.Background())
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, config{Expiry: time.Minute, Limit: 6, Reconcile: 100 * time.Millisecond}, ln, logger)
	}()

	url := "http://" + ln.Addr().String()
	var resp *http.Response
	require.Eventually(t, func() bool {
		req, rerr := http.NewRequest("POST", url+"/orders", strings.NewReader(`{"show_id":"s1","seats":["A1"]}`))
		if rerr != nil {
			t.Error(rerr)
			return false
		}
		req.Header.Set("X-User", "alice")
		resp, err = http.DefaultClient.Do(req)
		return err == nil
	}, 5*time.Second, 20*time.Millisecond)
	resp.Body.Close()
	assert.Equal(t, http.StatusCreated, resp.StatusCode)

	cancelCtx()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after cancel")
	}
	_, err = http.Get(url + "/orders/x")
	assert.Error(t, err, "the listener is closed")
	mu.Lock()
	assert.Contains(t, logs.String(), "msg=stopped")
	mu.Unlock()
}

func TestRocketMQUnreachable(t *testing.T) {
	err := serve(context.Background(), config{RocketMQ: "127.0.0.1:1", Broker: "127.0.0.1:1"}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rocketmq: create topic")
}

func TestFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-expiry", "30s", "-addr", ":9000"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, cfg.Expiry)
	assert.Equal(t, ":9000", cfg.Addr)
	for _, args := range [][]string{{"-expiry", "0s"}, {"-expiry", "soon"}, {"-limit", "0"}, {"-mysql", "a", "-postgres", "b"}, {"x"}} {
		_, err := parseFlags(args, io.Discard)
		assert.Error(t, err, args)
	}
	var help bytes.Buffer
	_, err = parseFlags([]string{"-h"}, &help)
	assert.ErrorContains(t, err, "help requested")
	assert.Contains(t, help.String(), "-expiry")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Late payment (on in this service): a payment after the timeout reinstates
// the order when its seats are free; the provider's repeats are repeats.
func TestLatePaymentReinstated(t *testing.T) {
	t.Parallel()
	h := newHarness(t, time.Second)
	no := h.place("alice", "show1", "L1", "L2")
	require.Equal(t, "cancelled", h.waitStatus(no, "alice"))
	require.Eventually(t, func() bool { return len(h.seatStates("show1")) == 0 }, 5*time.Second, 20*time.Millisecond)
	for i := range 3 {
		code, out := h.pay(no, "late-1")
		require.Equal(t, http.StatusOK, code, "callback %d: %v", i+1, out)
		assert.Equal(t, "paid", out["status"])
		assert.Equal(t, "late-1", out["payment_id"])
	}
	assert.Empty(t, h.refunded(), "reinstated, nothing to refund")
	assert.Equal(t, map[string]string{"L1": "sold:" + no, "L2": "sold:" + no}, h.seatStates("show1"))
	assert.Equal(t, 2, h.held("show1", "alice"))
	_, out := h.do("GET", "/orders/"+no, "alice", "")
	assert.Equal(t, "paid", out["status"])
	assert.Contains(t, h.metrics(), `orderexpiry_events_total{detail="",kind="reinstated"} 1`)
}

// A late payment whose seat was sold to another order meanwhile is
// refunded, once, and the seat stays the other order's.
func TestLatePaymentSeatResold(t *testing.T) {
	t.Parallel()
	h := newHarness(t, time.Second)
	no := h.place("alice", "show1", "R1")
	require.Equal(t, "cancelled", h.waitStatus(no, "alice"))
	require.Eventually(t, func() bool { return len(h.seatStates("show1")) == 0 }, 5*time.Second, 20*time.Millisecond)
	other := h.place("bob", "show1", "R1")
	for range 3 {
		code, out := h.pay(no, "late-2")
		assert.Equal(t, http.StatusConflict, code, out)
	}
	assert.Equal(t, []string{no + " late-2"}, h.refunded())
	assert.Equal(t, "locked:"+other, h.seatStates("show1")["R1"], "never taken from the other order")
	assert.Zero(t, h.held("show1", "alice"))
}

// Deadline control: the buyer extends (the message in flight re-arms by the
// stored deadline), an operator expires it now (a payment after that is
// refunded, never reinstated).
func TestExtendAndExpireNow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, time.Second)
	no := h.place("alice", "show1", "X1")
	code, out := h.do("POST", "/orders/"+no+"/extend", "alice", `{"seconds":60}`)
	require.Equal(t, http.StatusOK, code, out)
	extended, err := time.Parse(time.RFC3339Nano, out["expire_at"].(string))
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(time.Minute), extended, 5*time.Second)
	code, _ = h.do("POST", "/orders/"+no+"/extend", "mallory", `{"seconds":60}`)
	assert.Equal(t, http.StatusNotFound, code, "only the owner extends")
	code, out = h.do("POST", "/orders/"+no+"/extend", "alice", `{"seconds":30}`)
	assert.Equal(t, http.StatusOK, code, "at least 30s from now: it is, unchanged")
	assert.Equal(t, extended.Format(time.RFC3339Nano), out["expire_at"])
	code, _ = h.do("POST", "/orders/"+no+"/extend", "alice", `{"seconds":0}`)
	assert.Equal(t, http.StatusBadRequest, code)

	time.Sleep(2500 * time.Millisecond) // past the old deadline, its message and a reconcile round
	_, out = h.do("GET", "/orders/"+no, "alice", "")
	assert.Equal(t, "pending", out["status"], "I4: not cancelled at the old deadline")

	code, out = h.do("POST", "/admin/orders/"+no+"/expire", "", "")
	require.Equal(t, http.StatusOK, code, out)
	assert.Equal(t, "cancelled", out["status"])
	require.Eventually(t, func() bool { return len(h.seatStates("show1")) == 0 }, 5*time.Second, 20*time.Millisecond)
	code, _ = h.do("POST", "/admin/orders/"+no+"/expire", "", "")
	assert.Equal(t, http.StatusConflict, code, "expired already")
	code, _ = h.do("POST", "/orders/"+no+"/extend", "alice", `{"seconds":60}`)
	assert.Equal(t, http.StatusConflict, code)
	code, _ = h.pay(no, "pay-after-expire")
	assert.Equal(t, http.StatusConflict, code, "an operator's expire-now is final: refunded")
	assert.Equal(t, []string{no + " pay-after-expire"}, h.refunded())
	m := h.metrics()
	assert.Contains(t, m, `orderexpiry_events_total{detail="",kind="deadline_changed"} 2`, "extended, expired_now")
	assert.Contains(t, m, `orderexpiry_events_total{detail="expired",kind="cancelled"} 1`)
}

// The warning hook fires once per pending order, half the window before its
// deadline here, and never for an order paid before.
func TestWarningHook(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2*time.Second)
	no := h.place("alice", "show1", "W1")
	paid := h.place("bob", "show1", "W2")
	code, _ := h.pay(paid, "pay-w")
	require.Equal(t, http.StatusOK, code)
	require.Eventually(t, func() bool { return h.warnings(no) == 1 }, 5*time.Second, 20*time.Millisecond, "warned")
	_, out := h.do("GET", "/orders/"+no, "alice", "")
	assert.Equal(t, "pending", out["status"], "warned before its deadline")
	require.Equal(t, "cancelled", h.waitStatus(no, "alice"))
	assert.Equal(t, 1, h.warnings(no), "once")
	assert.Zero(t, h.warnings(paid), "never after the payment")
	assert.Contains(t, h.metrics(), `orderexpiry_events_total{detail="",kind="warned"} 1`)
}
