package levels_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seatflow/orderexpiry/levels"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestDefault(t *testing.T) {
	require.Equal(t, 18, levels.Default.Len())
	assert.Equal(t, time.Second, levels.Default.Delay(1))
	assert.Equal(t, 5*time.Minute, levels.Default.Delay(9))
	assert.Equal(t, 2*time.Hour, levels.Default.Delay(18))
	assert.Equal(t, 2*time.Hour, levels.Default.Delay(99), "above the last level clamps, as the broker does")
	assert.Equal(t, time.Duration(0), levels.Default.Delay(0))
	assert.Equal(t, levels.DefaultSpec, levels.Default.String())
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, spec, want string
	}{
		{"empty", "", "no levels"},
		{"blank", "  \t ", "no levels"},
		{"unsorted", "5s 1s", "not longer than level 1"},
		{"duplicate", "1s 1s", "not longer than level 1"},
		{"equal across units", "60s 1m", "not longer than level 1"},
		{"zero", "0s", "zero delay"},
		{"negative", "-1s", "not a positive whole number"},
		{"plus sign", "+1s", "not a positive whole number"},
		{"fraction", "1.5s", "not a positive whole number"},
		{"unknown unit", "1w", "unknown unit"},
		{"milliseconds", "100ms", "not a positive whole number"},
		{"no unit", "10", "unknown unit"},
		{"unit only", "s", "want a number and a unit"},
		{"overflow int64", "99999999999999999999s", "out of range"},
		{"overflow duration", "9999999999d", "longer than"},
		{"too long a spec", strings.Repeat("1s ", 400), "longer than 1024"},
		{"too many levels", manyLevels(65), "more than 64"},
		{"NUL", "1s\x002s", "not a positive whole number"},
		{"invalid utf-8", "1\xffs", "not a positive whole number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl, err := levels.Parse(tc.spec)
			require.Error(t, err)
			assert.True(t, errors.Is(err, levels.ErrInvalidSpec), "error %v must wrap ErrInvalidSpec", err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, 0, tbl.Len())
		})
	}
}

func manyLevels(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = strconv.Itoa(i+1) + "s"
	}
	return strings.Join(parts, " ")
}

func TestParseAccepts(t *testing.T) {
	tbl, err := levels.Parse(" 1s  2s\t3s 1m 2h 1d ")
	require.NoError(t, err)
	assert.Equal(t, 6, tbl.Len())
	assert.Equal(t, 24*time.Hour, tbl.Delay(6))
	assert.Equal(t, "1s 2s 3s 1m 2h 1d", tbl.String())
	_, err = levels.Parse(manyLevels(64))
	assert.NoError(t, err, "64 levels is the documented maximum")
}

// The greedy rule, including the case its own plan got wrong: 3s picks
// level 1 (1s), not level 2 (5s), because 5s would land after the deadline.
func TestFor(t *testing.T) {
	for _, tc := range []struct {
		remaining time.Duration
		level     int
	}{
		{-time.Hour, 1},
		{0, 1},
		{500 * time.Millisecond, 1},
		{time.Second, 1},
		{3 * time.Second, 1},
		{5 * time.Second, 2},
		{15 * time.Minute, 14},                // 10m
		{5*time.Minute - time.Millisecond, 8}, // 4m
		{5 * time.Minute, 9},
		{3 * time.Hour, 18},
		{time.Duration(1<<63 - 1), 18},
	} {
		assert.Equal(t, tc.level, levels.Default.For(tc.remaining), "For(%v)", tc.remaining)
	}
	assert.Equal(t, 0, levels.Table{}.For(time.Minute), "the zero table has no level")
}

func TestPlanSlack(t *testing.T) {
	// 4m59.95s left after a 10m hop with 50ms transit: no slack picks 4m, one
	// second of slack picks 5m.
	left := 5*time.Minute - 50*time.Millisecond
	assert.Equal(t, 8, levels.Default.Plan(left, 0))
	assert.Equal(t, 9, levels.Default.Plan(left, time.Second))
	assert.Equal(t, 8, levels.Default.Plan(left, -time.Hour), "negative slack counts as zero")
	assert.Equal(t, 18, levels.Default.Plan(time.Duration(1<<63-1), time.Hour), "no overflow")
}

// The hop counts the README quotes (11 for 15 minutes by the greedy rule), from the same model.
func TestSimulateHopCounts(t *testing.T) {
	transit := func(int) time.Duration { return 50 * time.Millisecond }
	for _, tc := range []struct {
		expiry time.Duration
		slack  time.Duration
		hops   int
	}{
		{15 * time.Minute, 0, 11},
		{3 * time.Hour, 0, 13},
		{24 * time.Hour, 0, 23},
		{15 * time.Minute, time.Second, 2},
	} {
		c := levels.Simulate(levels.Default, tc.expiry, tc.slack, transit)
		assert.Equal(t, tc.hops, c.Hops(), "expiry %v slack %v: levels %v", tc.expiry, tc.slack, c.Levels)
	}
	// With zero transit the greedy rule's "two hops for 15 minutes" holds.
	c := levels.Simulate(levels.Default, 15*time.Minute, 0, nil)
	assert.Equal(t, []int{14, 9}, c.Levels)
	assert.Equal(t, time.Duration(0), c.Late)
}

func genTable(t *rapid.T) levels.Table {
	n := rapid.IntRange(1, 20).Draw(t, "n")
	var parts []string
	cur := int64(0)
	for i := 0; i < n; i++ {
		cur += rapid.Int64Range(1, 600).Draw(t, "step")
		parts = append(parts, strconv.FormatInt(cur, 10)+"s")
	}
	tbl, err := levels.Parse(strings.Join(parts, " "))
	if err != nil {
		t.Fatalf("generated table rejected: %v", err)
	}
	return tbl
}

// Plan picks the largest level within remaining+slack, or level 1.
func TestPlanProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tbl := genTable(t)
		remaining := time.Duration(rapid.Int64Range(-int64(time.Hour), int64(10*time.Hour)).Draw(t, "remaining"))
		slack := time.Duration(rapid.Int64Range(0, int64(time.Minute)).Draw(t, "slack"))
		level := tbl.Plan(remaining, slack)
		if level < 1 || level > tbl.Len() {
			t.Fatalf("level %d out of range 1..%d", level, tbl.Len())
		}
		if level > 1 && tbl.Delay(level) > remaining+slack {
			t.Fatalf("level %d (%v) lands past remaining %v + slack %v", level, tbl.Delay(level), remaining, slack)
		}
		if level < tbl.Len() && tbl.Delay(level+1) <= remaining+slack {
			t.Fatalf("level %d is not the largest that fits", level)
		}
	})
}

// Chains converge and their lateness stays within the documented bound.
func TestChainProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tbl := genTable(t)
		expiry := time.Duration(rapid.Int64Range(0, int64(3*time.Hour)).Draw(t, "expiry"))
		slack := time.Duration(rapid.Int64Range(0, int64(5*time.Second)).Draw(t, "slack"))
		maxTransit := time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(t, "maxTransit"))
		transits := rapid.SliceOfN(rapid.Int64Range(0, int64(maxTransit)), 1, 50).Draw(t, "transits")
		transit := func(hop int) time.Duration { return time.Duration(transits[(hop-1)%len(transits)]) }
		c := levels.Simulate(tbl, expiry, slack, transit)
		bound := max(slack, tbl.Delay(1)) + maxTransit
		if c.Late < 0 || c.Late > bound {
			t.Fatalf("late %v outside [0, %v]", c.Late, bound)
		}
		if maxHops := int(expiry/tbl.Delay(1)) + 1; c.Hops() > maxHops {
			t.Fatalf("%d hops, more than the bound %d", c.Hops(), maxHops)
		}
	})
}

func TestStringRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tbl := genTable(t)
		again, err := levels.Parse(tbl.String())
		if err != nil {
			t.Fatal(err)
		}
		if again.String() != tbl.String() || again.Len() != tbl.Len() {
			t.Fatalf("round trip changed %q to %q", tbl, again)
		}
	})
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{levels.DefaultSpec, "", "1s", "0s", "5s 1s", "1d 2d", "99999999999999999999s", "1\x00s", "{a}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		tbl, err := levels.Parse(spec)
		if err != nil {
			if !errors.Is(err, levels.ErrInvalidSpec) {
				t.Fatalf("error %v does not wrap ErrInvalidSpec", err)
			}
			return
		}
		for i := 2; i <= tbl.Len(); i++ {
			if tbl.Delay(i) <= tbl.Delay(i-1) {
				t.Fatalf("accepted unsorted table %q", spec)
			}
		}
		if tbl.Delay(1) <= 0 {
			t.Fatalf("accepted non-positive level in %q", spec)
		}
	})
}
