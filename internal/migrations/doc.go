// Package migrations applies orderexpiry's versioned migration files
// (cancel/sqlstore/migrations) with the migration tools hosts run them with,
// goose and golang-migrate, on MariaDB, PostgreSQL and SQLite, and checks
// that they make exactly the tables Store.Migrate makes. It is a module of
// its own so that the library's module does not require the tools.
package migrations
