package sqlstore

import "github.com/seatflow/orderexpiry/cancel"

// Querier (cancel.Querier) is what the store needs of the host's transaction to place an
// order in it (Store.Place): database/sql's ExecContext and QueryContext.
// *sql.Tx, *sql.DB and *sql.Conn have them, and so do sqlx's Tx (it embeds
// the *sql.Tx), gorm's transaction (tx.Statement.ConnPool), and ent's
// generated client and Tx with ent's sql/execquery feature; a pgx host
// reaches one through stdlib.OpenDBFromPool (examples/orm shows each).
// QueryRowContext is left out on purpose: ent's generated code has none.
//
// Pass the transaction: on a *sql.DB, or a *sql.Conn outside a transaction,
// each statement commits on its own. Only Insert's transactions, known to
// be of the store's own *sql.DB, run its prepared statements: database/sql
// refuses them to a transaction of another *sql.DB, and a Querier does not
// say whose it is, so Place sends the text.
type Querier = cancel.Querier
