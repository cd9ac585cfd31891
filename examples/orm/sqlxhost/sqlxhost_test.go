package sqlxhost

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/examples/orm/internal/ormtest"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

func TestSqlx(t *testing.T) {
	open := map[sqlstore.Dialect]func(testing.TB) *sql.DB{sqlstore.MySQL: testenv.MySQL, sqlstore.Postgres: testenv.Postgres}
	ormtest.Run(t, open, func(t *testing.T, e *ormtest.Env) ormtest.Host {
		driver := "mysql"
		if e.Dialect == sqlstore.Postgres {
			driver = "pgx"
		}
		h := New(sqlx.NewDb(e.DB, driver), e.Svc, e.Store)
		return ormtest.Host{Place: h.Place, SetLastStep: func(f func(context.Context, cancel.Querier) error) { h.lastStep = f }}
	})
}
