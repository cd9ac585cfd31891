package sqlstore

import "reflect"

// The MySQL/MariaDB server error numbers the store acts on.
const (
	myErrDupFieldName    = 1060 // ER_DUP_FIELDNAME: Migrate's ADD COLUMN ran before
	myErrDupEntry        = 1062 // ER_DUP_ENTRY: a duplicate key
	myErrCheckRead       = 1020 // ER_CHECKREAD: the row changed since it was read (MariaDB snapshot isolation)
	myErrLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT
	myErrLockDeadlock    = 1213 // ER_LOCK_DEADLOCK; also a Galera certification conflict (the transaction was rolled back)
	myErrUnknownSysVar   = 1193 // ER_UNKNOWN_SYSTEM_VARIABLE: MySQL has no @@wsrep_on
	myErrSavepointGone   = 1305 // ER_SP_DOES_NOT_EXIST: a savepoint its transaction no longer has
)

// mysqlDriverPkg is the package of go-sql-driver/mysql's error type.
const mysqlDriverPkg = "github.com/go-sql-driver/mysql"

// mysqlErrorNumber returns the server error number of the first
// *mysql.MySQLError of go-sql-driver/mysql in err's chain (errors.Unwrap,
// both forms, depth first, as errors.As walks it), and whether there is one.
//
// It reads the type's exported field Number by reflection (in v1.10.1, the
// version go.mod requires: type MySQLError struct { Number uint16; SQLState
// [5]byte; Message string }), and only from a pointer to a struct named
// MySQLError declared in package github.com/go-sql-driver/mysql, never from
// another package's look-alike. This is so that sqlstore does not import
// the driver: an import would link it into every host's binary, and its
// init would register the "mysql" driver in a PostgreSQL- or SQLite-only
// host too. Reflection over the driver's type is
// preferred to parsing its text ("Error 1062 (23000): Duplicate entry …"):
// the text is formatting, and a message quoting another error's text would
// match. sqlstore's tests check it against the driver's real errors from
// MariaDB (duplicate key, deadlock), so a driver release that renamed the
// type or the field fails them instead of silently ending retries.
func mysqlErrorNumber(err error) (uint16, bool) {
	for err != nil {
		if v := reflect.ValueOf(err); v.Kind() == reflect.Pointer && !v.IsNil() {
			if t := v.Type().Elem(); t.Kind() == reflect.Struct && t.Name() == "MySQLError" && t.PkgPath() == mysqlDriverPkg {
				if f := v.Elem().FieldByName("Number"); f.IsValid() && f.Kind() == reflect.Uint16 {
					return uint16(f.Uint()), true
				}
			}
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if n, ok := mysqlErrorNumber(e); ok {
					return n, true
				}
			}
			return 0, false
		default:
			return 0, false
		}
	}
	return 0, false
}
