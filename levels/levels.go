// Package levels models RocketMQ's fixed delay levels and the rule that picks
// one for the time an order has left.
//
// A RocketMQ 4.x broker (and a 5.x broker used without timer messages) delays a
// message by one of a fixed list of durations, configured by the broker setting
// messageDelayLevel and numbered from 1. A message can therefore not be delayed
// by "exactly 15 minutes": the sender picks a level that does not land (much)
// past the deadline, and the consumer re-arms the message for whatever is left
// when it arrives early. This package holds the level table and that choice; it
// has no dependencies and does no I/O.
//
// # Names
//
// Table, Parse, MustParse, ErrInvalidSpec and MaxLevels: a broker's level
// table, read from its messageDelayLevel setting (MustParse for a spec known
// at compile time), and its bounds. DefaultSpec and Default: the broker's
// default table. Chain and Simulate: a message's hops through a table, for
// choosing a slack before deploying one.
package levels

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidSpec is wrapped by every error Parse returns.
var ErrInvalidSpec = errors.New("levels: invalid messageDelayLevel spec")

// Limits on what Parse accepts. The broker has no such limits, but a table of
// more levels than this, or a spec this long, is a configuration mistake.
const (
	MaxLevels  = 64
	maxSpecLen = 1024
)

// Table is an immutable, strictly increasing list of delay levels. Level n
// (counted from 1, as the broker counts) delays a message by Delay(n).
// The zero Table has no levels; use Default or Parse.
// A Table is safe for concurrent use.
type Table struct {
	delays []time.Duration
}

// DefaultSpec is RocketMQ's default messageDelayLevel.
const DefaultSpec = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

// Default is RocketMQ's default table: 18 levels from 1s (level 1) to 2h (level 18).
var Default = MustParse(DefaultSpec)

// Parse reads the broker's messageDelayLevel syntax: levels separated by
// spaces, each a positive integer followed by one unit of s, m, h or d
// ("1s 5s 10s 30s 1m"). Levels must be strictly increasing. Every error wraps
// ErrInvalidSpec and names the offending level.
func Parse(spec string) (Table, error) {
	if len(spec) > maxSpecLen {
		return Table{}, fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidSpec, len(spec), maxSpecLen)
	}
	fields := strings.Fields(spec)
	if len(fields) == 0 {
		return Table{}, fmt.Errorf("%w: no levels", ErrInvalidSpec)
	}
	if len(fields) > MaxLevels {
		return Table{}, fmt.Errorf("%w: %d levels, more than %d", ErrInvalidSpec, len(fields), MaxLevels)
	}
	delays := make([]time.Duration, len(fields))
	for i, f := range fields {
		d, err := parseLevel(f)
		if err != nil {
			return Table{}, fmt.Errorf("%w: level %d %q: %v", ErrInvalidSpec, i+1, f, err)
		}
		if i > 0 && d <= delays[i-1] {
			return Table{}, fmt.Errorf("%w: level %d %q is not longer than level %d %q", ErrInvalidSpec, i+1, f, i, fields[i-1])
		}
		delays[i] = d
	}
	return Table{delays: delays}, nil
}

// MustParse is Parse for specs known at compile time; it panics on error.
func MustParse(spec string) Table {
	t, err := Parse(spec)
	if err != nil {
		panic(err)
	}
	return t
}

var units = map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour}

func parseLevel(f string) (time.Duration, error) {
	if len(f) < 2 {
		return 0, errors.New("want a number and a unit (s, m, h or d)")
	}
	unit, ok := units[f[len(f)-1]]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q (want s, m, h or d)", f[len(f)-1:])
	}
	num := f[:len(f)-1]
	for _, c := range num {
		if c < '0' || c > '9' {
			return 0, errors.New("not a positive whole number")
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, errors.New("number out of range")
	}
	if n == 0 {
		return 0, errors.New("zero delay")
	}
	if n > int64(maxDelay/unit) {
		return 0, fmt.Errorf("longer than %v", maxDelay)
	}
	return time.Duration(n) * unit, nil
}

// maxDelay bounds a single level; RocketMQ stores delays in milliseconds in an
// int64, and a year is far beyond any sane order window.
const maxDelay = 366 * 24 * time.Hour

// Len returns the number of levels.
func (t Table) Len() int { return len(t.delays) }

// Delay returns the delay of level (1-based). Like the broker, a level above
// the last is clamped to the last; a level below 1 has no delay (0).
func (t Table) Delay(level int) time.Duration {
	switch {
	case level < 1 || len(t.delays) == 0:
		return 0
	case level > len(t.delays):
		return t.delays[len(t.delays)-1]
	default:
		return t.delays[level-1]
	}
}

// For is the greedy rule: the largest level whose delay is not above
// remaining; level 1 when remaining is below the first level (or zero or
// negative). It is Plan with no slack. It returns 0 only for the zero Table.
func (t Table) For(remaining time.Duration) int { return t.Plan(remaining, 0) }

// Plan picks the level for one hop of a re-arm chain: the largest level whose
// delay is not above remaining+slack, or level 1 when even that is too short.
//
// Guarantees, for a chain in which every arrival re-plans with what is left
// (and the consumer cancels once nothing is left):
//   - a hop planned with at least Delay(1) left lands at most slack after the
//     deadline, one planned with less lands at most Delay(1) after it (plus,
//     either way, the message's transit time); so the last hop of a chain is
//     at most max(slack, Delay(1)) plus transit late;
//   - the chain converges: each hop consumes at least Delay(1) of the time
//     left, so an order with remaining time r is done in at most
//     r/Delay(1)+1 hops, and in practice in a handful.
//
// With slack 0 and real transit times every hop lands a little early, which is
// why the greedy rule takes 11 hops for 15 minutes once messages take 50 ms
// in transit; a slack of one second brings that back to two (10m, then 5m).
// Negative slack counts as 0. It returns 0 only for the zero Table.
func (t Table) Plan(remaining, slack time.Duration) int {
	if len(t.delays) == 0 {
		return 0
	}
	if slack < 0 {
		slack = 0
	}
	limit := remaining + slack
	if limit < remaining { // overflowed: every level fits
		return len(t.delays)
	}
	// Binary search: the first level longer than limit.
	lo, hi := 0, len(t.delays)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if t.delays[mid] <= limit {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return 1
	}
	return lo
}

// String returns the table in the broker's messageDelayLevel syntax, using the
// largest unit that divides each level exactly.
func (t Table) String() string {
	var b strings.Builder
	for i, d := range t.delays {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch {
		case d%(24*time.Hour) == 0:
			fmt.Fprintf(&b, "%dd", d/(24*time.Hour))
		case d%time.Hour == 0:
			fmt.Fprintf(&b, "%dh", d/time.Hour)
		case d%time.Minute == 0:
			fmt.Fprintf(&b, "%dm", d/time.Minute)
		default:
			fmt.Fprintf(&b, "%ds", d/time.Second)
		}
	}
	return b.String()
}
