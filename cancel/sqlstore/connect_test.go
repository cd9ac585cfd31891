package sqlstore_test

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// TestPlaceConnectFailedIsKnown places through a database that cannot be
// reached (a primary that died, a Patroni replica refusing a read-write
// session): the placing statement was never sent, so nothing committed and
// the outcome is known. It must not be reported as an unknown commit, which
// would keep the placement's seats locked until the reconciler's Grace.
func TestPlaceConnectFailedIsKnown(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dialect sqlstore.Dialect
		open    func(t testing.TB) *sql.DB
		driver  string
		dead    string
	}{
		{"postgres one statement", sqlstore.Postgres, testenv.Postgres, "pgx", "postgres://oe:oe@127.0.0.1:1/oe?sslmode=disable&connect_timeout=2"},
		// A server that answers but is not what the DSN asks for (the
		// primary, for a read-only session; for a read-write one, a
		// replica while Patroni fails over): the login succeeds, the
		// session is refused before any statement.
		{"postgres session refused", sqlstore.Postgres, testenv.Postgres, "pgx", ""},
		{"mysql transaction", sqlstore.MySQL, testenv.MySQL, "mysql", "oe:oe@tcp(127.0.0.1:1)/oe?timeout=2s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store, err := sqlstore.New(tc.open(t), tc.dialect)
			require.NoError(t, err)
			require.NoError(t, store.Migrate(ctx))
			if tc.dead == "" {
				tc.dead = os.Getenv(testenv.EnvPostgres)
				sep := "?"
				if strings.Contains(tc.dead, "?") {
					sep = "&"
				}
				tc.dead += sep + "target_session_attrs=read-only"
			}
			dead, err := sql.Open(tc.driver, tc.dead)
			require.NoError(t, err)
			defer dead.Close()
			p := cancel.Placement{OrderNo: "o-" + testenv.Unique(), UserID: "u1", ShowID: "s1", Seats: []string{"A1"},
				ExpireAt: time.Now().Add(time.Minute), LockID: "1.1"}
			err = store.Insert(dead, nil)(ctx, p)
			require.Error(t, err)
			t.Logf("placing through an unreachable database: %v", err)
			require.NotErrorIs(t, err, expiry.ErrCommitUnknown, "nothing was sent, so nothing committed")
		})
	}
}
