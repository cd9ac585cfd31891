package sqlstore

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/internal/testenv"
)

// EnvBenchClaims, set to a power of ten (e.g. 1000000), runs
// TestClaimsPassFigures on that many claims; unset, it is skipped, so the
// normal test run stays fast. The command and its figures are in README.md.
const EnvBenchClaims = "OE_BENCH_CLAIMS"

// TestClaimsPassFigures measures what a seat-store rebuild costs SQL: one
// pass of Claims over every claim, a page of 200 (reconcile.BatchDefault) at a
// time, on MariaDB and PostgreSQL. For comparison it times sampled pages of
// the OR-form keyset that PostgreSQL used before (each page filtered every
// claim before its cursor) and extrapolates its pass. It logs FIGURE lines.
func TestClaimsPassFigures(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv(EnvBenchClaims))
	if err != nil {
		t.Skipf("set %s to a power of ten (1000000) to measure a rebuild's Claims pass", EnvBenchClaims)
	}
	digits := len(strconv.Itoa(n)) - 1
	require.Equal(t, n, pow10(digits), "%s must be a power of ten", EnvBenchClaims)
	const batch, perShow, samples = 200, 10000, 20
	ctx := context.Background()
	for _, d := range []Dialect{MySQL, Postgres} {
		t.Run(string(d), func(t *testing.T) {
			db := testenv.MySQL
			if d == Postgres {
				db = testenv.Postgres
			}
			sdb := db(t)
			s := migrated(t, sdb, d)
			start := time.Now()
			fillClaims(t, sdb, d, digits, perShow)
			t.Logf("FIGURE fill dialect=%s claims=%d seconds=%.1f", d, n, time.Since(start).Seconds())

			pass := func() (rows int, elapsed time.Duration, page []time.Duration) {
				cursor := ""
				start := time.Now()
				for {
					t0 := time.Now()
					claims, next, err := s.Claims(ctx, cursor, batch)
					require.NoError(t, err)
					page = append(page, time.Since(t0))
					rows += len(claims)
					if next == "" {
						return rows, time.Since(start), page
					}
					cursor = next
				}
			}
			pass() // warm the buffer pool
			rows, elapsed, page := pass()
			require.Equal(t, n, rows)
			pages := len(page)
			slices.Sort(page)
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			t.Logf("FIGURE claims-pass dialect=%s claims=%d batch=%d pages=%d seconds=%.2f claims_per_s=%.0f page_ms_p50=%.2f p99=%.2f max=%.1f",
				d, rows, batch, pages, elapsed.Seconds(), float64(rows)/elapsed.Seconds(),
				ms(page[pages/2]), ms(page[pages*99/100]), ms(page[pages-1]))

			if d != Postgres {
				return // MySQL's form is the OR form already
			}
			orForm := rebind(d, "SELECT s.show_id, s.seat_id, s.order_no, o.user_id, o.status FROM oe_order_seat s JOIN oe_order o ON o.order_no = s.order_no WHERE s.show_id > ? OR (s.show_id = ? AND s.seat_id > ?) ORDER BY s.show_id, s.seat_id LIMIT ?")
			var total time.Duration
			for i := 0; i < samples; i++ {
				pos := (2*i + 1) * n / (2 * samples) // the middle of each twentieth
				show, seat := "s"+pad(pos/perShow, 4), "x"+pad(pos, 7)
				t0 := time.Now()
				rs, err := sdb.QueryContext(ctx, orForm, show, show, seat, batch)
				require.NoError(t, err)
				got := 0
				for rs.Next() {
					got++
				}
				require.NoError(t, rs.Err())
				rs.Close()
				took := time.Since(t0)
				total += took
				if i == samples/2 {
					t.Logf("FIGURE or-form-page dialect=%s claims=%d position=%d ms=%.1f", d, n, pos, float64(took.Microseconds())/1000)
				}
			}
			mean := total / samples
			t.Logf("FIGURE or-form-pass-estimate dialect=%s claims=%d pages=%d mean_page_ms=%.1f seconds=%.0f (from %d sampled pages)",
				d, n, pages, float64(mean.Microseconds())/1000, (mean * time.Duration(pages)).Seconds(), samples)
		})
	}
}

func pad(v, width int) string {
	s := strconv.Itoa(v)
	for len(s) < width {
		s = "0" + s
	}
	return s
}
