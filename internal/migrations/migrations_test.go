package migrations_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4"
	migratedb "github.com/golang-migrate/migrate/v4/database"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/pressly/goose/v3"
	goosedb "github.com/pressly/goose/v3/database"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// dir is where the library keeps its migration files.
const dir = "../../cancel/sqlstore/migrations"

// The tools' own version tables, named so that a host's (goose_db_version,
// schema_migrations) and the library's tables (oe_*) stay apart.
const (
	gooseTable   = "orderexpiry_goose_version"
	migrateTable = "orderexpiry_schema_migrations"
)

// tool applies the library's migrations to a database with one migration
// tool: up to a version (0: all), or down to none.
type tool struct {
	name string
	up   func(t *testing.T, db *sql.DB, d sqlstore.Dialect, to int)
	down func(t *testing.T, db *sql.DB, d sqlstore.Dialect)
}

var tools = []tool{
	{"goose", gooseUp, gooseDown},
	{"golang-migrate", migrateUp, migrateDown},
}

func gooseProvider(t *testing.T, db *sql.DB, d sqlstore.Dialect) *goose.Provider {
	gd := map[sqlstore.Dialect]goosedb.Dialect{sqlstore.MySQL: goosedb.DialectMySQL, sqlstore.Postgres: goosedb.DialectPostgres, sqlstore.SQLite: goosedb.DialectSQLite3}[d]
	store, err := goosedb.NewStore(gd, gooseTable)
	require.NoError(t, err)
	p, err := goose.NewProvider("", db, os.DirFS(filepath.Join(dir, "goose", string(d))), goose.WithStore(store))
	require.NoError(t, err)
	return p
}

func gooseUp(t *testing.T, db *sql.DB, d sqlstore.Dialect, to int) {
	p := gooseProvider(t, db, d)
	var err error
	if to == 0 {
		_, err = p.Up(context.Background())
	} else {
		_, err = p.UpTo(context.Background(), int64(to))
	}
	require.NoError(t, err)
}

func gooseDown(t *testing.T, db *sql.DB, d sqlstore.Dialect) {
	_, err := gooseProvider(t, db, d).DownTo(context.Background(), 0)
	require.NoError(t, err)
}

// migrator opens golang-migrate on db. Its MySQL driver sends a file as one
// query, so it runs on a connection of its own with multiStatements, as the
// tool's documentation asks.
func migrator(t *testing.T, db *sql.DB, d sqlstore.Dialect) *migrate.Migrate {
	src, err := iofs.New(os.DirFS(filepath.Join(dir, "golang-migrate")), string(d))
	require.NoError(t, err)
	var drv migratedb.Driver
	switch d {
	case sqlstore.MySQL:
		var name string
		require.NoError(t, db.QueryRow("SELECT DATABASE()").Scan(&name))
		cfg, err := mysql.ParseDSN(os.Getenv("OE_MYSQL_DSN"))
		require.NoError(t, err)
		cfg.DBName, cfg.MultiStatements = name, true
		own, err := sql.Open("mysql", cfg.FormatDSN())
		require.NoError(t, err)
		t.Cleanup(func() { own.Close() })
		drv, err = migratemysql.WithInstance(own, &migratemysql.Config{MigrationsTable: migrateTable})
		require.NoError(t, err)
	case sqlstore.Postgres:
		drv, err = migratepgx.WithInstance(db, &migratepgx.Config{MigrationsTable: migrateTable})
		require.NoError(t, err)
	default:
		drv, err = migratesqlite.WithInstance(db, &migratesqlite.Config{MigrationsTable: migrateTable})
		require.NoError(t, err)
	}
	m, err := migrate.NewWithInstance("iofs", src, string(d), drv)
	require.NoError(t, err)
	return m
}

func migrateUp(t *testing.T, db *sql.DB, d sqlstore.Dialect, to int) {
	m := migrator(t, db, d)
	var err error
	if to == 0 {
		err = m.Up()
	} else {
		err = m.Migrate(uint(to))
	}
	if err == migrate.ErrNoChange {
		err = nil
	}
	require.NoError(t, err)
}

func migrateDown(t *testing.T, db *sql.DB, d sqlstore.Dialect) {
	err := migrator(t, db, d).Down()
	if err == migrate.ErrNoChange {
		err = nil
	}
	require.NoError(t, err)
}

// fresh opens an empty database of d.
func fresh(t *testing.T, d sqlstore.Dialect) *sql.DB {
	switch d {
	case sqlstore.MySQL:
		return testenv.MySQL(t)
	case sqlstore.Postgres:
		return testenv.Postgres(t)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "oe.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

var schemaName = regexp.MustCompile(`\boe_t_[0-9a-f]+\.`)

// tables describes the library's tables in db (oe_*: columns with their
// types, nullability, defaults and collations, and indexes with their
// columns), the tools' version tables left out, so that two databases
// compare equal exactly when they hold the same library schema.
func tables(t *testing.T, db *sql.DB, d sqlstore.Dialect) []string {
	var q string
	switch d {
	case sqlstore.MySQL:
		q = `SELECT CONCAT_WS(' ', TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, IFNULL(COLUMN_DEFAULT, 'NULL'), IFNULL(COLLATION_NAME, '-'))
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'oe\_%'
		UNION ALL SELECT CONCAT_WS(' ', TABLE_NAME, INDEX_NAME, NON_UNIQUE, SEQ_IN_INDEX, COLUMN_NAME)
		FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'oe\_%'
		UNION ALL SELECT CONCAT_WS(' ', TABLE_NAME, ENGINE) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'oe\_%'`
	case sqlstore.Postgres:
		q = `SELECT concat_ws(' ', table_name, column_name, data_type, character_maximum_length, is_nullable, coalesce(column_default, 'NULL'))
		FROM information_schema.columns WHERE table_schema = current_schema() AND table_name LIKE 'oe\_%'
		UNION ALL SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename LIKE 'oe\_%'`
	default:
		q = `SELECT type || ' ' || name || ' ' || coalesce(sql, '') FROM sqlite_master WHERE name LIKE 'oe\_%' ESCAPE '\'`
	}
	rows, err := db.Query(q)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, schemaName.ReplaceAllString(s, ""))
	}
	require.NoError(t, rows.Err())
	slices.Sort(out)
	return out
}

// migrated is what Store.Migrate makes of an empty database: the schema the
// files must make.
func migrated(t *testing.T, d sqlstore.Dialect, mapping ...sqlstore.Mapping) []string {
	db := fresh(t, d)
	s, err := sqlstore.New(db, d, mapping...)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Migrate(context.Background()))
	return tables(t, db, d)
}

// works places an order on db with the library's schema, cancels it and
// reads it back, through the store.
func works(t *testing.T, db *sql.DB, d sqlstore.Dialect) {
	ctx := context.Background()
	s, err := sqlstore.New(db, d)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Check(ctx))
	no := "o" + testenv.Unique()
	require.NoError(t, s.Place(ctx, db, cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "show1", Seats: []string{"A1", "A2"}, ExpireAt: time.Now().Add(-time.Minute)}))
	res, err := s.CancelPending(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonTimeout})
	require.NoError(t, err)
	assert.True(t, res.Changed)
	assert.ElementsMatch(t, []string{"A1", "A2"}, res.Seats)
	st, err := s.Statuses(ctx, []string{no})
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusCancelled, st[no].Status)
}

var dialects = []sqlstore.Dialect{sqlstore.MySQL, sqlstore.Postgres, sqlstore.SQLite}

// TestFilesMakeMigratesSchema: each tool, on an empty database, makes
// exactly the tables Migrate makes (the library's schema; with version 1
// alone, a Mapping's side tables), the store works on them, Migrate after
// the tool changes nothing, and down removes every table.
func TestFilesMakeMigratesSchema(t *testing.T) {
	for _, d := range dialects {
		for _, tl := range tools {
			t.Run(string(d)+"/"+tl.name, func(t *testing.T) {
				t.Parallel()
				want := migrated(t, d)
				db := fresh(t, d)
				tl.up(t, db, d, 1)
				side := tables(t, db, d)
				for _, l := range side {
					assert.NotRegexp(t, `\boe_order(_seat)? `, l, "version 1 holds the side tables only")
				}
				assert.NotEmpty(t, side)
				tl.up(t, db, d, 0)
				got := tables(t, db, d)
				assert.Equal(t, want, got, "the files make another schema than Migrate")
				works(t, db, d)
				s, err := sqlstore.New(db, d)
				require.NoError(t, err)
				require.NoError(t, s.Migrate(context.Background()))
				s.Close()
				assert.Equal(t, got, tables(t, db, d), "Migrate changed what the files made")
				tl.down(t, db, d)
				assert.Empty(t, tables(t, db, d), "down left tables")
			})
		}
	}
}

// TestFilesAfterMigrate: a host that ran Migrate at startup moves to its
// migration tool; the files apply over the tables Migrate made (IF NOT
// EXISTS), change nothing, and the tool records the versions.
func TestFilesAfterMigrate(t *testing.T) {
	for _, d := range dialects {
		for _, tl := range tools {
			t.Run(string(d)+"/"+tl.name, func(t *testing.T) {
				t.Parallel()
				db := fresh(t, d)
				s, err := sqlstore.New(db, d)
				require.NoError(t, err)
				require.NoError(t, s.Migrate(context.Background()))
				s.Close()
				no := "kept" + testenv.Unique()
				require.NoError(t, placeOne(db, d, no))
				before := tables(t, db, d)
				tl.up(t, db, d, 0)
				assert.Equal(t, before, tables(t, db, d))
				st := statuses(t, db, d, no)
				assert.Equal(t, expiry.StatusPending, st, "the order placed before the tool ran is kept")
				assert.Equal(t, 2, version(t, db, tl.name), "the tool records both versions")
			})
		}
	}
}

func placeOne(db *sql.DB, d sqlstore.Dialect, no string) error {
	s, err := sqlstore.New(db, d)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Place(context.Background(), db, cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "show1", Seats: []string{"B1"}, ExpireAt: time.Now().Add(time.Hour)})
}

func statuses(t *testing.T, db *sql.DB, d sqlstore.Dialect, no string) expiry.Status {
	s, err := sqlstore.New(db, d)
	require.NoError(t, err)
	defer s.Close()
	st, err := s.Statuses(context.Background(), []string{no})
	require.NoError(t, err)
	require.Contains(t, st, no)
	return st[no].Status
}

// version reads the version a tool recorded.
func version(t *testing.T, db *sql.DB, tool string) int {
	var v int
	q := "SELECT MAX(version_id) FROM " + gooseTable
	if tool != "goose" {
		q = "SELECT version FROM " + migrateTable
	}
	require.NoError(t, db.QueryRow(q).Scan(&v))
	return v
}

// TestFilesForAMapping: a host whose orders are its own table (a Mapping)
// runs version 1 only, and gets exactly the tables Migrate makes for it.
func TestFilesForAMapping(t *testing.T) {
	for _, d := range dialects {
		for _, tl := range tools {
			t.Run(string(d)+"/"+tl.name, func(t *testing.T) {
				t.Parallel()
				db := fresh(t, d)
				_, err := db.Exec("CREATE TABLE shop_order (no VARCHAR(64) NOT NULL PRIMARY KEY, buyer VARCHAR(64) NOT NULL, event VARCHAR(64) NOT NULL, state INT NOT NULL, due_ms BIGINT NOT NULL)")
				require.NoError(t, err)
				_, err = db.Exec("CREATE INDEX shop_order_due ON shop_order (state, due_ms, no)")
				require.NoError(t, err)
				m := sqlstore.Mapping{Orders: sqlstore.Orders{Table: "shop_order", OrderNo: "no", UserID: "buyer", ShowID: "event", Status: "state", Deadline: sqlstore.Time{Column: "due_ms"},
					Statuses: sqlstore.Statuses{Pending: 0, Paid: []any{1}, Cancelled: []any{2}}}}
				want := migrated(t, d, m)
				tl.up(t, db, d, 1)
				assert.Equal(t, want, tables(t, db, d))
				s, err := sqlstore.New(db, d, m)
				require.NoError(t, err)
				defer s.Close()
				assert.NoError(t, s.Check(context.Background()))
			})
		}
	}
}
