package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/expiry"
)

// timeline prints one line per event: the time since the scenario started,
// the order, what happened. It is safe for concurrent use; the library's logs
// are written through it too (Write), so lines never interleave.
type timeline struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
	width int // of the order column
}

func (t *timeline) say(order, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if order == "" {
		order = "-"
	}
	fmt.Fprintf(t.w, "%8s  %-*s  %s\n", t.offset(), t.width, order, fmt.Sprintf(format, args...))
}

// plain prints a line without time or order (headers, the verification).
func (t *timeline) plain(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, format+"\n", args...)
}

// Write implements io.Writer for the library's slog handler: one record per call.
func (t *timeline) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "%8s  %-*s  log: %s", t.offset(), t.width, "", p)
	return len(p), nil
}

func (t *timeline) offset() string {
	if t.start.IsZero() {
		return ""
	}
	return fmt.Sprintf("+%.2fs", time.Since(t.start).Seconds())
}

type sendInfo struct {
	level int
	delay time.Duration
}

// Observe implements expiry.Observer: what the library reports becomes the
// timeline, and the transitions it reports are checked against the store at
// the end.
func (d *demo) Observe(_ context.Context, e expiry.Event) {
	switch e.Kind {
	case expiry.KindSent: // every accepted message, with the level the RocketMQ rule chose
		d.mu.Lock()
		d.sends[e.OrderNo]++
		d.hops++
		d.lastSend[e.OrderNo] = sendInfo{e.Level, e.Delay}
		d.mu.Unlock()
		return
	case expiry.KindBadMessage:
		d.mu.Lock()
		d.badMessages++
		d.mu.Unlock()
		d.tl.say("", "bad message acknowledged, dropped and counted: %v", e.Err)
		return
	}
	if d.byNo[e.OrderNo] == nil {
		return // another run's order, on shared servers
	}
	switch e.Kind {
	case expiry.KindHandled:
		switch e.Outcome {
		case expiry.OutcomeFinal:
			d.tl.say(e.OrderNo, "hop %d arrived: order already decided, ignored", e.Hop)
		case expiry.OutcomeMissing:
			d.tl.say(e.OrderNo, "hop %d arrived: no such order, ignored", e.Hop)
		case expiry.OutcomeFailed:
			d.tl.say(e.OrderNo, "hop %d failed, will be redelivered: %v", e.Hop, e.Err)
		}
	case expiry.KindRearmed:
		d.mu.Lock()
		s := d.lastSend[e.OrderNo]
		d.rearms++
		d.mu.Unlock()
		d.tl.say(e.OrderNo, "hop %d arrived %v early → re-armed: hop %d level %d (%v)", e.Hop-1, e.Delay.Round(time.Millisecond), e.Hop, s.level, s.delay)
	case expiry.KindSendFailed:
		d.tl.say(e.OrderNo, "send of hop %d failed: %v (the reconciler will cancel it)", e.Hop, e.Err)
	case expiry.KindCancelled:
		d.decide(e.OrderNo, "cancelled("+e.Reason+")")
		d.tl.say(e.OrderNo, "cancelled (%s), %s", e.Reason, seats(e.Seats))
	case expiry.KindReleaseFailed:
		d.tl.say(e.OrderNo, "seat release failed: %v; left to the reconciler", e.Err)
	case expiry.KindPaid:
		d.decide(e.OrderNo, "paid")
		d.tl.say(e.OrderNo, "paid, %s sold", seats(e.Seats))
	case expiry.KindRepaired:
		switch e.Reason {
		case "released":
			d.mu.Lock()
			d.repairedSeats += e.Seats
			d.mu.Unlock()
			d.tl.say(e.OrderNo, "reconciler released %s still locked in Redis", seats(e.Seats))
		case "sold":
			d.tl.say(e.OrderNo, "reconciler marked %s sold in Redis", seats(e.Seats))
		}
	}
}

func (d *demo) decide(orderNo, what string) {
	d.mu.Lock()
	d.decided[orderNo] = append(d.decided[orderNo], what)
	d.lastDecided = time.Now()
	d.mu.Unlock()
}

// problem records a violation noticed while running; it is listed at the end.
func (d *demo) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.mu.Lock()
	d.problems = append(d.problems, msg)
	d.mu.Unlock()
	d.tl.say("", "VIOLATION: %s", msg)
}

func seats(n int) string {
	if n == 1 {
		return "1 seat"
	}
	return fmt.Sprintf("%d seats", n)
}
