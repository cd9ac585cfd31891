// Package orm shows cancel.Service.Place inside the transaction of the host's
// own data-access layer: gorm, sqlx, ent and pgx, each in a package of its
// own that places an order and a row of the host's in one transaction. It
// is a module of its own, so that the library's go.mod names none of them.
package orm
