package enthost

import (
	"context"
	"database/sql"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/examples/orm/enthost/ent"
	"github.com/seatflow/orderexpiry/examples/orm/internal/ormtest"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

func TestEnt(t *testing.T) {
	open := map[sqlstore.Dialect]func(testing.TB) *sql.DB{sqlstore.MySQL: testenv.MySQL, sqlstore.Postgres: testenv.Postgres}
	ormtest.Run(t, open, func(t *testing.T, e *ormtest.Env) ormtest.Host {
		d := dialect.MySQL
		if e.Dialect == sqlstore.Postgres {
			d = dialect.Postgres
		}
		h := New(ent.NewClient(ent.Driver(entsql.OpenDB(d, e.DB))), e.Svc, e.Store)
		return ormtest.Host{Place: h.Place, SetLastStep: func(f func(context.Context, cancel.Querier) error) { h.lastStep = f }}
	})
}
