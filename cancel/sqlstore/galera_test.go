package sqlstore

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// TestProofOfTheTransaction: on a Galera node a transaction can end without
// the connection being told (see galera.go). Here the loss is played by a
// ROLLBACK through the transaction's own handle, which database/sql does not
// see either: whatever ran after it ran on its own. The outcome that
// matters: inTx reports success only when what fn wrote committed, and a
// write after a read that lost its transaction is refused before it runs.
// On a plain MariaDB server the store finds no wsrep and adds nothing.
func TestProofOfTheTransaction(t *testing.T) {
	ctx := context.Background()
	db := testenv.MySQL(t)
	_, err := db.ExecContext(ctx, "CREATE TABLE proof (id INT PRIMARY KEY)")
	require.NoError(t, err)
	count := func(id int) int {
		var n int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM proof WHERE id = ?", id).Scan(&n))
		return n
	}

	plain, err := New(db, MySQL)
	require.NoError(t, err)
	require.NoError(t, plain.inTx(ctx, nil, func(tx *sql.Tx) error { return nil }))
	assert.EqualValues(t, 2, plain.galera.Load(), "a MariaDB server without wsrep is not a Galera node")

	s, err := New(db, MySQL)
	require.NoError(t, err)
	s.galera.Store(1) // as on a Galera node: the proof's SQL is MariaDB's own

	t.Run("lost before COMMIT", func(t *testing.T) {
		err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO proof VALUES (1)"); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "ROLLBACK") // the abort nobody was told of
			return err
		})
		require.ErrorIs(t, err, errTxAborted)
		assert.True(t, retryable(err), "tried again, as after a deadlock")
		assert.Zero(t, count(1), "nothing committed")
	})
	t.Run("lost before a write that follows a read", func(t *testing.T) {
		var wrote bool
		err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM proof").Scan(&n); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "ROLLBACK"); err != nil {
				return err
			}
			if err := s.proveTx(ctx, tx, true); err != nil {
				return err
			}
			wrote = true
			_, err := tx.ExecContext(ctx, "INSERT INTO proof VALUES (2)")
			return err
		})
		require.ErrorIs(t, err, errTxAborted)
		assert.False(t, wrote, "the write after the read never ran")
		assert.Zero(t, count(2), "nothing committed")
	})
	t.Run("lost in a placement's rows", func(t *testing.T) {
		require.NoError(t, s.Migrate(ctx))
		p := cancel.Placement{OrderNo: "proof-p1", UserID: "u1", ShowID: "proof-show", Seats: []string{"a1"}, ExpireAt: time.Now().Add(time.Hour)}
		err := s.Insert(db, func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
			var n int
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM proof").Scan(&n); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "ROLLBACK") // the abort the host's read was not told of
			return err
		})(ctx, p)
		require.ErrorIs(t, err, errTxAborted, "the placement is not reported made")
		assert.NotErrorIs(t, err, expiry.ErrCommitUnknown, "nothing was placed: Place releases the seats")
		_, err = s.Order(ctx, p.OrderNo)
		assert.ErrorIs(t, err, expiry.ErrNotFound)
	})
	t.Run("kept", func(t *testing.T) {
		err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM proof").Scan(&n); err != nil {
				return err
			}
			if err := s.proveTx(ctx, tx, true); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO proof VALUES (3)")
			return err
		})
		require.NoError(t, err)
		assert.Equal(t, 1, count(3))
	})
}
