package sqlstore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// What database/sql hands a host is a Querier; examples/orm checks sqlx,
// gorm, ent and pgx on the real databases.
var (
	_ cancel.Querier = (*sql.Tx)(nil)
	_ cancel.Querier = (*sql.DB)(nil)
	_ cancel.Querier = (*sql.Conn)(nil)
)

// The store places on whatever runs the host's statements: its own
// *sql.DB's transactions (through its prepared statements), a transaction of
// another *sql.DB on the same database (which cannot run them: the text goes
// instead), and a *sql.Conn in a transaction of the host's making.
func TestPlaceOnAnyQuerier(t *testing.T) {
	ctx := context.Background()
	dsn := "file:" + filepath.Join(t.TempDir(), "oe.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"
	open := func() *sql.DB {
		db, err := sql.Open("sqlite", dsn)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, db.Close()) })
		return db
	}
	db, other := open(), open()
	store, err := sqlstore.New(db, sqlstore.SQLite)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	t.Cleanup(func() { assert.NoError(t, store.Close()) })
	svc, err := cancel.New(cancel.Config{Store: store, Seats: memstore.NewSeats(nil)})
	require.NoError(t, err)
	pl := func(no string) cancel.Placement {
		return cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s1", Seats: []string{no + "-1", no + "-2"}, ExpireAt: time.Now().Add(time.Hour)}
	}

	require.NoError(t, svc.Place(ctx, pl("own"), store.Insert(db, nil)))
	require.NoError(t, svc.Place(ctx, pl("other"), store.Insert(other, nil)), "a transaction of another *sql.DB, after the store prepared its statements")
	tx, err := other.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, store.Place(ctx, tx, pl("hosttx")))
	require.NoError(t, tx.Commit())

	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "BEGIN")
	require.NoError(t, err)
	require.NoError(t, store.Place(ctx, conn, pl("conn")))
	_, err = conn.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	require.NoError(t, conn.Close())

	for _, no := range []string{"own", "other", "hosttx"} {
		o, err := store.Order(ctx, no)
		require.NoError(t, err, no)
		assert.Equal(t, expiry.StatusPending, o.Status, no)
	}
	_, err = store.Order(ctx, "conn")
	assert.ErrorIs(t, err, expiry.ErrNotFound, "the *sql.Conn's statements were in its transaction, rolled back")
}
