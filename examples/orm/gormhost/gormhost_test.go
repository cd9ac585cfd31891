package gormhost

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/examples/orm/internal/ormtest"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

func TestGorm(t *testing.T) {
	open := map[sqlstore.Dialect]func(testing.TB) *sql.DB{sqlstore.MySQL: testenv.MySQL, sqlstore.Postgres: testenv.Postgres}
	ormtest.Run(t, open, func(t *testing.T, e *ormtest.Env) ormtest.Host {
		dialector := mysql.New(mysql.Config{Conn: e.DB})
		if e.Dialect == sqlstore.Postgres {
			dialector = postgres.New(postgres.Config{Conn: e.DB})
		}
		db, err := gorm.Open(dialector, &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
		require.NoError(t, err)
		h := New(db, e.Svc, e.Store)
		return ormtest.Host{Place: h.Place, SetLastStep: func(f func(context.Context, cancel.Querier) error) { h.lastStep = f }}
	})
}
