package sqlstore

import (
	"context"
	"database/sql"
	"errors"
)

// On a MariaDB Galera Cluster, a transaction can end without the
// connection being told. Galera aborts a local transaction when another
// node's conflicting writeset is applied here (a brute-force abort), and
// reports it, as a deadlock (1213), to the connection's next command. When
// the abort lands while a SELECT runs, that SELECT may return its rows and
// the report be lost: the statements after it then run on their own
// (autocommit), and COMMIT succeeds with nothing to commit. A transition
// would be reported as made that never happened, and its writes after the
// read would have committed one by one (seen in internal/galera's
// TestCertificationConflicts: a payment's decision row committed for an
// order another node cancelled).
//
// So on a Galera node every transaction of the store holds a savepoint
// from its start (beginProof), and proves it still exists before it writes
// after a read and before COMMIT (proveTx): a savepoint is gone with the
// transaction that held it, and RELEASE SAVEPOINT says so (1305) whether or
// not the abort was reported. An abort after the proof is reported to the
// next command, a write or COMMIT, as any deadlock is. The cost is two
// round trips per transaction, two more per read followed by writes, on
// Galera only; the check of wsrep_on is made once per Store.
//
// A hook's statements are the host's: on a Galera node the hook gets a
// provedQuerier, which proves the transaction the same way before any
// statement that follows a read of the hook's.

// errTxAborted is a transaction the database ended without reporting it
// (see proveTx): nothing of it committed, and it is tried again, as after a
// deadlock.
var errTxAborted = errors.New("sqlstore: the database aborted the transaction without reporting it")

// onGalera reports whether the store talks to a Galera node (wsrep_on),
// asking once, through tx: the pool may have no other connection free.
func (s *Store) onGalera(ctx context.Context, tx *sql.Tx) (bool, error) {
	switch s.galera.Load() {
	case 1:
		return true, nil
	case 2:
		return false, nil
	}
	if s.dialect != MySQL {
		s.galera.Store(2)
		return false, nil
	}
	var on int
	err := tx.QueryRowContext(ctx, "SELECT @@wsrep_on").Scan(&on)
	if n, ok := mysqlErrorNumber(err); ok && n == myErrUnknownSysVar {
		s.galera.Store(2) // MySQL has no wsrep_on
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if on == 0 {
		s.galera.Store(2)
		return false, nil
	}
	s.galera.Store(1)
	return true, nil
}

// beginProof sets the savepoint proveTx looks for, on a Galera node.
func (s *Store) beginProof(ctx context.Context, tx *sql.Tx) error {
	if on, err := s.onGalera(ctx, tx); err != nil || !on {
		return err
	}
	_, err := tx.ExecContext(ctx, "SAVEPOINT oe_tx")
	return err
}

// proveTx returns errTxAborted when, on a Galera node, tx is no longer the
// transaction beginProof began (its savepoint is gone); again sets the
// savepoint anew, for a later proof.
func (s *Store) proveTx(ctx context.Context, tx *sql.Tx, again bool) error {
	if s.galera.Load() != 1 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT oe_tx"); err != nil {
		if n, ok := mysqlErrorNumber(err); ok && n == myErrSavepointGone {
			return errTxAborted
		}
		return err
	}
	if !again {
		return nil
	}
	_, err := tx.ExecContext(ctx, "SAVEPOINT oe_tx")
	return err
}

// provedQuerier is a hook's handle on a Galera node (see runHook): a
// statement that follows one of the hook's reads is sent only once the
// hook's savepoint proves the transaction still exists. Otherwise a read
// that lost the report of an abort would let the hook's next write commit
// on its own, a row of an attempt the store then tries again
// (internal/galera's TestOutboxHookUnderCertificationConflicts: an outbox
// row for a cancel that never happened). Two round trips per statement
// after a read.
type provedQuerier struct {
	tx   *sql.Tx
	read bool // a read ran since the last proof
}

// ExecContext runs query in the transaction, after the proof when a read
// came before it.
func (q *provedQuerier) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := q.prove(ctx); err != nil {
		return nil, err
	}
	return q.tx.ExecContext(ctx, query, args...)
}

// QueryContext runs query in the transaction, after the proof when a read
// came before it (a query may write: RETURNING).
func (q *provedQuerier) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := q.prove(ctx); err != nil {
		return nil, err
	}
	q.read = true
	return q.tx.QueryContext(ctx, query, args...)
}

// prove releases and sets again the hook's savepoint (runHook's) after a
// read: errTxAborted when it is gone.
func (q *provedQuerier) prove(ctx context.Context) error {
	if !q.read {
		return nil
	}
	q.read = false
	if _, err := q.tx.ExecContext(ctx, "RELEASE SAVEPOINT oe_hook"); err != nil {
		if n, ok := mysqlErrorNumber(err); ok && n == myErrSavepointGone {
			return errTxAborted
		}
		return err
	}
	_, err := q.tx.ExecContext(ctx, "SAVEPOINT oe_hook")
	return err
}
