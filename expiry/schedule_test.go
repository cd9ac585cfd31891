package expiry_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
)

func openDB(t *testing.T) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "s.db")+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.Exec("CREATE TABLE t (no TEXT PRIMARY KEY)")
	require.NoError(t, err)
	return db
}

func rows(t *testing.T, db *sql.DB) int {
	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM t").Scan(&n))
	return n
}

func TestInTx(t *testing.T) {
	ctx := context.Background()
	clock := expirytest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	insert := func(no string) func(tx *sql.Tx, after *expiry.AfterCommit) error {
		return func(tx *sql.Tx, after *expiry.AfterCommit) error {
			_, err := tx.Exec("INSERT INTO t VALUES (?)", no)
			after.Add(no, clock.Now().Add(15*time.Minute))
			return err
		}
	}

	t.Run("commit sends after commit", func(t *testing.T) {
		db, rec := openDB(t), &recorder{}
		s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: rec, Runtime: expiry.Runtime{Clock: clock, Observer: rec}})
		require.NoError(t, err)
		require.NoError(t, s.InTx(ctx, db, nil, insert("o1")))
		assert.Equal(t, 1, rows(t, db))
		require.Len(t, rec.sent, 1)
		assert.Equal(t, expiry.Message{OrderNo: "o1", Hop: 1}, rec.sent[0].m)
		assert.Equal(t, 15*time.Minute, rec.sent[0].delay)
	})

	t.Run("I6: rollback sends nothing", func(t *testing.T) {
		db, rec := openDB(t), &recorder{}
		s, _ := expiry.NewScheduler(expiry.SchedulerConfig{Sender: rec, Runtime: expiry.Runtime{Clock: clock}})
		boom := errors.New("payment provider said no")
		err := s.InTx(ctx, db, nil, func(tx *sql.Tx, after *expiry.AfterCommit) error {
			if err := insert("o1")(tx, after); err != nil {
				return err
			}
			return boom
		})
		assert.ErrorIs(t, err, boom)
		assert.Equal(t, 0, rows(t, db))
		assert.Empty(t, rec.sent)
	})

	t.Run("I6: panic rolls back and sends nothing", func(t *testing.T) {
		db, rec := openDB(t), &recorder{}
		s, _ := expiry.NewScheduler(expiry.SchedulerConfig{Sender: rec, Runtime: expiry.Runtime{Clock: clock}})
		assert.Panics(t, func() {
			_ = s.InTx(ctx, db, nil, func(tx *sql.Tx, after *expiry.AfterCommit) error {
				_ = insert("o1")(tx, after)
				panic("host bug")
			})
		})
		assert.Equal(t, 0, rows(t, db))
		assert.Empty(t, rec.sent)
	})

	t.Run("send failure is counted, not returned", func(t *testing.T) {
		db, rec := openDB(t), &recorder{err: errors.New("broker down")}
		s, _ := expiry.NewScheduler(expiry.SchedulerConfig{Sender: rec, Runtime: expiry.Runtime{Clock: clock, Observer: rec}})
		require.NoError(t, s.InTx(ctx, db, nil, insert("o1")), "the order is placed")
		assert.Equal(t, 1, rows(t, db))
		assert.Equal(t, 1, rec.count(expiry.KindSendFailed))
	})

	t.Run("invalid order number is counted, not sent", func(t *testing.T) {
		rec := &recorder{}
		s, _ := expiry.NewScheduler(expiry.SchedulerConfig{Sender: rec, Runtime: expiry.Runtime{Observer: rec}})
		assert.False(t, s.Schedule(ctx, "bad id", time.Now()))
		assert.Empty(t, rec.sent)
		assert.Equal(t, 1, rec.count(expiry.KindSendFailed))
	})
}

func TestAfterCommitWithOtherTransactionManagers(t *testing.T) {
	rec := &recorder{}
	s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: rec})
	require.NoError(t, err)
	var after expiry.AfterCommit
	after.Add("o1", time.Now().Add(time.Minute))
	after.Add("o2", time.Now().Add(time.Minute))
	assert.Equal(t, 2, after.Flush(context.Background(), s))
	assert.Equal(t, 0, after.Flush(context.Background(), s), "flushed orders are forgotten")
	assert.Len(t, rec.sent, 2)
	_, err = expiry.NewScheduler(expiry.SchedulerConfig{})
	assert.ErrorContains(t, err, "Sender")
	_, err = expiry.NewScheduler(expiry.SchedulerConfig{Sender: rec, SendTimeout: -time.Second})
	assert.ErrorContains(t, err, "SendTimeout", "nonsense is an error naming the field, not a silent default")
}
