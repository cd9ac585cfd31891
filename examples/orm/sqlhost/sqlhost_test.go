package sqlhost

import (
	"context"
	"database/sql"
	"testing"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/examples/orm/internal/ormtest"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

func TestDatabaseSQL(t *testing.T) {
	open := map[sqlstore.Dialect]func(testing.TB) *sql.DB{sqlstore.MySQL: testenv.MySQL, sqlstore.Postgres: testenv.Postgres}
	ormtest.Run(t, open, func(t *testing.T, e *ormtest.Env) ormtest.Host {
		h := New(e.DB, e.Svc, e.Store, e.Dialect == sqlstore.Postgres)
		return ormtest.Host{Place: h.Place, SetLastStep: func(f func(context.Context, cancel.Querier) error) { h.lastStep = f }}
	})
}
