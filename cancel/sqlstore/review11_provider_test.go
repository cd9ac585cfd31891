package sqlstore

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReview11CreatedEpochSecondsIntegerOnPostgres (I18, I3): Check
// accepts a PostgreSQL `integer` (int4) column for an EpochSeconds time
// (timeClass "integer"; classOK takes "integer" or "bigint"). On a mapping
// with a deadline column, the created-at column was only ever written
// before 489cb0b; now SetDeadline of an order the host inserted itself reads
// it through createdMS as "(create_s * 1000)": int4 * int4 is int4 on
// PostgreSQL, so any epoch after 1970-01-25 raises "integer out of range".
// SetDeadline then fails for every such order: Extend errors, and the
// provider's re-arm errors, so Timeout returns an error (verdictDone) and
// the reconciler's askAll leaves the order out, round after round: with a
// provider answering open (or failing), the order is never cancelled,
// past its maximum hold and past one reconcile interval. The product must
// be computed in 64 bits (CAST(col AS BIGINT) * 1000), or Check must
// refuse int4 there. Judged on the statement's text (no server here).
func TestReview11CreatedEpochSecondsIntegerOnPostgres(t *testing.T) {
	m := Mapping{Orders: Orders{
		Table: "order_info", OrderNo: "order_no", UserID: "user_id", ShowID: "show_id", Status: "status",
		Statuses:  Statuses{Pending: 0, Paid: []any{1}, Cancelled: []any{2}},
		Deadline:  Time{Column: "expire_time", Type: DateTimeUTC},
		CreatedAt: Time{Column: "create_s", Type: EpochSeconds},
	}}
	r, err := resolve(Postgres, m)
	require.NoError(t, err)
	q := r.build()
	require.NotEmpty(t, q.createdMS.sql)
	t.Log(q.createdMS.sql)
	assert.False(t, strings.Contains(q.createdMS.sql, `("create_s" * 1000)`) || strings.Contains(q.createdMS.sql, `(create_s * 1000)`),
		"an int4 epoch-seconds column times an int4 literal overflows on PostgreSQL: %s", q.createdMS.sql)
}
