package sqlstore

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Mapping says where the library's notions live in the host's own tables:
// which table holds the orders and which columns their number, user, show,
// status and deadline; the values the host uses for each status; the type of
// the deadline column; the seat-claims table and what a cancel and a payment
// do to a claim; and a constant condition every statement must carry. It is
// declared once, given to New, and turned into SQL text there: nothing a
// caller passes at run time ever becomes SQL text, only arguments.
//
// The zero Mapping is the library's own schema (Schema, Migrate), the same as
// DefaultMapping. With any other mapping the store creates only its own
// tables (oe_payment_discrepancy and oe_order_side, in Migrate), keeping
// there what the host's table lacks, and never alters the host's:
// call Check at startup, which reads the live database and names every
// missing or unusable table, column and index.
type Mapping struct {
	// Orders is the host's orders table.
	Orders Orders
	// Claims is the host's seat-claims table; nil: the host keeps no claims
	// in SQL (Claims then returns none, so the reconciler cannot rebuild a
	// seat store that lost its data from SQL).
	Claims *Claims
}

// Orders maps the orders table. Table, OrderNo, UserID, ShowID, Status and
// Statuses are required, and either Deadline or CreatedAt with Window.
type Orders struct {
	// Table is the table's name (optionally schema.table).
	Table string
	// OrderNo is the order number's column: unique (alone or with the
	// Where columns), string typed. It may sit beside a numeric primary key.
	OrderNo string
	// NumericOrderNo says OrderNo, and the claims table's order number
	// column, are integer columns (saleor's order_order.number). Order
	// numbers are then the canonical decimal form of an int64, as with
	// NumericUserID: any other finds no order, and Place refuses it.
	NumericOrderNo bool
	// UserID is the user's column, string typed unless NumericUserID.
	UserID string
	// NumericUserID says UserID is an integer column. User ids are then the
	// canonical decimal form of an int64 ("42", never "042" or "+42"); any
	// other user id owns no order, and Place refuses it.
	NumericUserID bool
	// ShowID is the show's column, string typed unless NumericShowID.
	ShowID string
	// NumericShowID says ShowID, and the claims table's show column, are
	// integer columns (a show is an event row's numeric key). Show ids are
	// then the canonical decimal form of an int64, as with NumericUserID;
	// Place refuses any other.
	NumericShowID bool
	// Status is the status column, integer or string typed as the values in
	// Statuses are.
	Status string
	// Statuses are the values of Status.
	Statuses Statuses
	// Deadline is the column holding the time the order expires. The guard
	// of a timeout compares it with the database's clock converted to its
	// type, so an index on (Status, Deadline) serves the reconciler's scan.
	Deadline Time
	// CreatedAt is the creation time. Without Deadline it is the deadline's
	// base: an order is due at CreatedAt + Window (the guard and the scan
	// then compare CreatedAt with now − Window, and the index must be on
	// (Status, CreatedAt)); Place then writes the placement's ExpireAt −
	// Window. With Deadline, Place writes the database's now into it.
	// Optional with Deadline.
	CreatedAt Time
	// Window is the payment window, with CreatedAt and no Deadline; whole
	// seconds unless CreatedAt is in epoch milliseconds.
	Window time.Duration
	// WindowFrom, instead of Window, is a window the host keeps in a row
	// of another table (a settings page's "close unpaid orders after n
	// minutes"): every statement reads it there, so a change applies to
	// the pending orders at once, as the host's own code would apply it.
	WindowFrom *WindowSetting
	// CancelReason, optional, receives the cancel's reason (up to
	// cancel.MaxReasonLen bytes).
	CancelReason string
	// UpdatedAt, optional, receives the database's now on every write. It
	// is the age Statuses answers: the reconciler's lock pass leaves an
	// order decided less than reconcile.Config.Settle ago to the instance
	// that decided it. Without it every age is cancel.AgeUnknown and the
	// pass does not wait.
	UpdatedAt Time
	// PaymentID, optional, receives the payment id that paid the order.
	// Without it a paid order reports no payment id (Result.PaymentID ""),
	// so a repeated callback cannot be told from a second payment.
	PaymentID string
	// Version, optional, is an integer column the host's ORM uses for
	// optimistic locking: every write of the library increments it.
	Version string
	// Where are conditions every statement on the table carries and every
	// insert writes: a tenant column equal to a constant, a soft-delete flag
	// that must be 0. A row that fails them is invisible to the library.
	Where []Condition
	// Scope, optional, names the rows this store serves in the library's
	// records of payments (oe_payment_discrepancy: what was refunded, what
	// paid) and, through Store.Scope, in the seat store's keys. Empty: the
	// Table and the Where conditions, sorted ("shop_order?tenant_id=7").
	// Those records are how a repeated callback is known to be decided
	// already, so a scope that moves would decide its payments again (I9):
	// a host that changes Table or Where (adopting a soft-delete flag)
	// either sets Scope to the scope it had (its seat keys stay too) or
	// lists that scope in PreviousScopes. 1-255 bytes of printable ASCII;
	// a derived-looking scope of this table whose conditions contradict
	// Where (another tenant's) is refused.
	Scope string
	// PreviousScopes are scopes this store's payment records were kept
	// under before (see Scope); "" stands for the records made before the
	// library kept scopes. Migrate moves the records there that are of
	// this store's orders (number, buyer and fate match) to Scope, and
	// Check stops asking about them; Check names a scope to list here when
	// most of the records it samples there are of this store's orders. A
	// record of an order deleted since stays where it was (a repeat of its
	// callback is decided again), and a payment id already decided in Scope
	// keeps that decision. A scope that reads as another tenant's (a
	// condition the Where contradicts) is refused.
	PreviousScopes []string
	// Fill are columns Place does not otherwise write and the constant
	// every insert of an order writes into each: the host's NOT NULL
	// columns without a default (an amount, a channel, an ORM's version
	// counter), which would make the first Place fail. Unlike Where, no
	// statement reads them. A value is an integer, a bool, "" or a string
	// as in a Condition; HostWrites says the host's own rows insert the
	// order row and write the column (Store.Insert's rows function; see
	// HostWrites). A column Place writes already (the order number, user, show,
	// status, deadline, creation and updated-at times, the Where columns)
	// cannot be filled; the cancel reason, payment id and version can (a
	// cancel or a payment writes them later). Check names every NOT NULL
	// column without a default that neither Place nor Fill writes.
	Fill []Condition
}

// WindowSetting is a payment window kept in another table: the value of
// Column, a whole number of Unit (an integer, or a string of one, like a
// key-value table's), in the one row Where selects. Check reads it.
type WindowSetting struct {
	// Table is the table's name (optionally schema.table).
	Table string
	// Column holds the window, a count of Unit.
	Column string
	// Unit is what one counts: time.Minute, time.Second, …; whole
	// seconds unless CreatedAt is in epoch milliseconds.
	Unit time.Duration
	// Where selects the row: columns equal to constants, as Orders.Where.
	Where []Condition
}

// errNoStatus is New's answer to a mapping without a status column, which
// a shop's hold table (no status, rows deleted when the hold expires) is.
var errNoStatus = errors.New(`sqlstore: mapping: Orders.Status is empty: the orders table needs a status column, whose values say pending, paid or cancelled. A hold table without one (its rows deleted when the hold expires) is not the orders table: map the table of the orders the holds belong to, and the hold table as Claims (without a State column, a cancel deletes the order's rows); a shop with no orders table of its own keeps its orders in the library's schema (New without a Mapping)`)

// Statuses are the values the host's status column takes. All are integers
// (int, int64, …) or all strings (1-32 bytes of A-Z a-z 0-9 _ . -), each
// used once.
type Statuses struct {
	// Pending is the one value of an order waiting for its payment.
	Pending any
	// Paid are the values that mean paid (paid, used, refunded …): the
	// order is decided and its seats are sold. A payment writes the first.
	Paid []any
	// Cancelled are the values that mean cancelled (by the user, by a
	// timeout, closed …). A cancel writes the first, unless CancelledBy
	// names its reason.
	Cancelled []any
	// Paying are the values the host's own code writes while the buyer is
	// paying (on the provider's page, a payment step): the order is
	// payable, and not the library's to expire. A payment for it is taken
	// as for a pending order (the first Paid value, its seats sold); a
	// timeout, the reconciler and a user's cancel leave it alone, as a
	// status the host owns (expiry.StatusHost, I19), until the host writes
	// one of the mapping's other values. Optional.
	Paying []any
	// CancelledBy is the value a cancel writes for a reason
	// (cancel.ReasonTimeout, cancel.ReasonUser, …); each value must be one
	// of Cancelled.
	CancelledBy map[cancel.Reason]any
}

// TimeType is how a time column stores its value.
type TimeType int

// The time column types. The library writes deadlines in EpochMillis
// truncated to the millisecond, in the others rounded up to the second (a
// deadline is never moved earlier: I4).
const (
	// EpochMillis: an integer of milliseconds since 1970-01-01 UTC.
	EpochMillis TimeType = iota
	// EpochSeconds: an integer of seconds since 1970-01-01 UTC.
	EpochSeconds
	// DateTimeUTC: a date and time without a zone holding UTC: MySQL/MariaDB
	// DATETIME(n), PostgreSQL timestamp, SQLite text "YYYY-MM-DD HH:MM:SS"
	// (with optional ".fff").
	DateTimeUTC
	// Timestamp: an instant: MySQL/MariaDB TIMESTAMP(n) (shown in the
	// session's time zone; the comparison stays an instant), PostgreSQL
	// timestamptz. Not on SQLite.
	Timestamp
)

// String names the type for messages.
func (t TimeType) String() string {
	switch t {
	case EpochMillis:
		return "epoch milliseconds"
	case EpochSeconds:
		return "epoch seconds"
	case DateTimeUTC:
		return "datetime (UTC)"
	case Timestamp:
		return "timestamp"
	}
	return "TimeType(" + strconv.Itoa(int(t)) + ")"
}

// Time is a time column and its type.
type Time struct {
	// Column is the column's name; "" leaves the time unmapped.
	Column string
	// Type is how the column stores a time.
	Type TimeType
}

// Condition is a column that must equal a constant (an integer or a string
// of 1-64 bytes of A-Z a-z 0-9 _ . -), or be NULL (IsNull), in every
// statement on its table.
type Condition struct {
	// Column is the column's name.
	Column string
	// Value is the constant it must equal.
	Value any
}

// IsNull, as a Condition's Value, is the condition "Column IS NULL": an
// ORM's soft-delete time that must be unset (GORM's deleted_at). Place
// writes NULL into the column. A unique key holding the column does not
// make the order number unique (NULLs are distinct), so Check does not
// count it there.
const IsNull nullValue = 1

// nullValue is the type of IsNull.
type nullValue int

// HostWrites, as the Value of an Orders.Fill or Claims.Fill entry, says
// the host's own rows write the column: they insert the order row (or the
// claims) themselves, in the rows function the host hands Store.Insert (or
// before Store.Place, on the host's own transaction). Check then accepts
// the column as filled. The library writes the rest of the placement in the
// same transaction (its side row, and the claims unless they are the
// host's too) and reads back what the host's rows wrote: the order pending,
// of the placement's user and show (byte for byte), in the store's scope,
// and its live claims exactly the placement's seats of its show; anything
// else places nothing. So an order the host inserts is the library's as much as one it
// inserted: its seats are freed right after a cancel's commit, it is
// warned, its lock is known. Insert without a rows function refuses (an
// error wrapping cancel.ErrUnsupported naming the columns).
const HostWrites hostValue = 1

// hostValue is the type of HostWrites.
type hostValue int

// Claims maps the seat-claims table: one row per seat an order claims.
// Table, ShowID, SeatID and OrderNo are required. The table must let at most
// one live claim per (ShowID, SeatID) exist (a unique key, partial or not):
// the last line of defence against a double sale.
type Claims struct {
	// Table is the table's name (optionally schema.table).
	Table string
	// ShowID is the show's column (string typed).
	ShowID string
	// SeatID is the seat's column (string typed).
	SeatID string
	// OrderNo is the column of the claiming order's number (string typed),
	// leading an index: a cancel reads and frees the order's claims by it.
	OrderNo string
	// State, optional, is a column holding the claim's state. Without it a
	// cancel deletes the order's claims and a payment leaves them. With it,
	// Place writes Locked, a cancel writes Released (nil: deletes the rows
	// instead) and a payment writes Sold (nil: leaves them). Values are
	// integers or strings, as in Statuses.
	State string
	// Locked is the state of a live claim of a pending order.
	Locked any
	// Sold is the state a payment writes (nil: a payment leaves the claims).
	Sold any
	// Released is the state a cancel writes (nil: a cancel deletes them).
	Released any
	// Where are conditions every statement on the table carries and every
	// insert writes, as Orders.Where.
	Where []Condition
	// Fill are columns every insert of a claim writes a constant into,
	// as Orders.Fill (not the show, seat, order number or state columns,
	// nor a Where column).
	Fill []Condition
}

// DefaultMapping is the library's own schema (schema/*.sql) as a Mapping:
// what the zero Mapping means. Given to New, it is the zero Mapping
// (Migrate creates and upgrades the whole schema); edited, it is a host's.
func DefaultMapping() Mapping {
	return Mapping{
		Orders: Orders{
			Table: "oe_order", OrderNo: "order_no", UserID: "user_id", ShowID: "show_id", Status: "status",
			Statuses:     Statuses{Pending: 0, Paid: []any{1}, Cancelled: []any{2}},
			Deadline:     Time{Column: "expire_at_ms", Type: EpochMillis},
			CreatedAt:    Time{Column: "created_at_ms", Type: EpochMillis},
			UpdatedAt:    Time{Column: "updated_at_ms", Type: EpochMillis},
			CancelReason: "cancel_reason", PaymentID: "payment_id",
		},
		Claims: &Claims{Table: "oe_order_seat", ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_no", State: "state", Locked: 1, Sold: 2},
	}
}

// isZero reports the zero Mapping.
func (m Mapping) isZero() bool {
	return m.Claims == nil && m.Orders.Table == "" && m.Orders.OrderNo == "" && m.Orders.Status == "" && m.Orders.Deadline.Column == ""
}

var (
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	valueRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
)

// lit is a validated constant: its SQL text (a decimal integer or a quoted
// string of safe bytes), its key as the database returns it scanned into a
// string, and the Go value to bind as an argument.
type lit struct {
	sql, key string
	arg      any
	str      bool
}

// literal validates v (an integer or a safe string) for what.
func literal(what string, v any) (lit, error) {
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int8:
		n = int64(x)
	case int16:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	case uint8:
		n = int64(x)
	case uint16:
		n = int64(x)
	case uint32:
		n = int64(x)
	case string:
		if !valueRE.MatchString(x) {
			return lit{}, fmt.Errorf("sqlstore: mapping: %s %q: a string value is 1-64 bytes of A-Z a-z 0-9 _ . -", what, x)
		}
		return lit{sql: "'" + x + "'", key: x, arg: x, str: true}, nil
	case nil:
		return lit{}, fmt.Errorf("sqlstore: mapping: %s is missing", what)
	default:
		return lit{}, fmt.Errorf("sqlstore: mapping: %s %v: values are integers or strings, not %T", what, v, v)
	}
	s := strconv.FormatInt(n, 10)
	return lit{sql: s, key: s, arg: n}, nil
}

// quoteIdent returns the quoting of an identifier in d.
func quoteIdent(d Dialect, name string) string {
	if d == MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// ident validates a column or table name (a table may be schema.table) and
// returns it quoted for d.
func ident(d Dialect, what, name string, table bool) (string, error) {
	parts := []string{name}
	if table {
		parts = strings.Split(name, ".")
	}
	if len(parts) > 2 {
		return "", fmt.Errorf("sqlstore: mapping: %s %q: at most schema.table", what, name)
	}
	for i, p := range parts {
		if !identRE.MatchString(p) {
			return "", fmt.Errorf("sqlstore: mapping: %s %q: a name is 1-64 bytes of A-Z a-z 0-9 _, not starting with a digit", what, name)
		}
		parts[i] = quoteIdent(d, p)
	}
	return strings.Join(parts, "."), nil
}

// cond is a validated Condition.
type cond struct {
	name, col string // the raw name (for Check) and the quoted column
	v         lit
	exact     bool // a string on MySQL over a host's column: compared as bytes too (conds)
	null      bool // IsNull: "col IS NULL", and NULL inserted
}

// resolved is a Mapping validated and quoted for one dialect: what the
// statements are built from.
type resolved struct {
	d   Dialect
	raw Mapping // as given (names unquoted), for Check

	defaultSchema bool // the library's own: ascii_bin ids on MySQL
	exactIDs      bool // a host's columns: compare ids and string constants a second time as bytes

	o, no, user, show, status string
	deadline                  Time // Column quoted; "" with CreatedAt+Window
	created                   Time
	window                    time.Duration
	reason, updated           string
	updatedType               TimeType
	payment, version          string
	where                     []cond
	fill                      []cond   // Orders.Fill's constants, written by the order's inserts
	hostFill                  []string // Orders.Fill's HostWrites columns
	writes                    []string // the orders' columns an insert writes (raw names, for Check)
	scope                     string   // Store.Scope: "" for the library's own schema
	scopeParts                []string // the Where conditions the derived scope names, sorted
	previousScopes            []string // Orders.PreviousScopes

	pending   lit
	paid      []lit
	cancelled []lit
	paying    []lit // Statuses.Paying: payable, read as the host's (3)
	by        map[cancel.Reason]lit
	statusOf  map[string]int // key → 0 pending, 1 paid, 2 cancelled, 3 paying

	claims                       bool
	c, cShow, cSeat, cNo, cState string
	cLocked, cSold, cReleased    *lit
	cWhere, cFill                []cond
	cHostFill, cWrites           []string // as hostFill and writes, for the claims

	// A window kept in a settings row (Orders.WindowFrom): its value in
	// milliseconds as a scalar subquery, its table, column and conditions.
	windowSQL, windowTable, windowCol string
	windowWhere                       []cond
}

// contradicts reports a condition ("col=val") of scope, read as a derived
// scope of table, that names a column of the Where conditions parts with
// another value: the scope is another store's (another tenant's).
func contradicts(scope, table string, parts []string) (part, mine string, ok bool) {
	rest, found := strings.CutPrefix(scope, table)
	if !found || !strings.HasPrefix(rest, "?") {
		return "", "", false
	}
	for _, part := range strings.Split(rest[1:], "&") {
		col, _, _ := strings.Cut(part, "=")
		for _, mine := range parts {
			if mc, _, _ := strings.Cut(mine, "="); mc == col && mine != part {
				return part, mine, true
			}
		}
	}
	return "", "", false
}

// badScope says whether a scope is not 1-255 bytes of printable ASCII.
func badScope(s string) bool {
	return s == "" || len(s) > 255 || strings.IndexFunc(s, func(c rune) bool { return c < 0x20 || c > 0x7e }) >= 0
}

// resolve validates m for d.
func resolve(d Dialect, m Mapping) (*resolved, error) {
	r := &resolved{d: d}
	if m.isZero() || reflect.DeepEqual(m, DefaultMapping()) {
		m = DefaultMapping()
		r.defaultSchema = true
	}
	r.raw = m
	r.exactIDs = !r.defaultSchema
	var errs []error
	id := func(what, name string, table bool) string {
		q, err := ident(d, what, name, table)
		if err != nil {
			errs = append(errs, err)
		}
		return q
	}
	o := m.Orders
	r.o = id("orders table", o.Table, true)
	r.no = id("order number column", o.OrderNo, false)
	r.user = id("user column", o.UserID, false)
	r.show = id("show column", o.ShowID, false)
	if o.Status == "" {
		errs = append(errs, errNoStatus)
	} else {
		r.status = id("status column", o.Status, false)
	}
	timeCol := func(what string, t Time) Time {
		if t.Column == "" {
			return Time{}
		}
		if t.Type < EpochMillis || t.Type > Timestamp {
			errs = append(errs, fmt.Errorf("sqlstore: mapping: %s %s: unknown type %v", what, t.Column, t.Type))
		}
		if t.Type == Timestamp && d == SQLite {
			errs = append(errs, fmt.Errorf("sqlstore: mapping: %s %s: SQLite has no timestamp type: use DateTimeUTC (text) or an epoch", what, t.Column))
		}
		return Time{Column: id(what, t.Column, false), Type: t.Type}
	}
	r.deadline = timeCol("deadline column", o.Deadline)
	r.created = timeCol("created-at column", o.CreatedAt)
	r.window = o.Window
	switch {
	case r.deadline.Column != "" && o.Window != 0:
		errs = append(errs, errors.New("sqlstore: mapping: a Window is for a table without a Deadline column"))
	case o.WindowFrom != nil:
		// resolveWindow, once the conditions can be resolved
	case r.deadline.Column == "" && (r.created.Column == "" || o.Window <= 0):
		errs = append(errs, errors.New("sqlstore: mapping: the orders need a Deadline column, or CreatedAt and a positive Window"))
	case r.deadline.Column == "" && r.created.Type != EpochMillis && o.Window%time.Second != 0:
		errs = append(errs, fmt.Errorf("sqlstore: mapping: Window %v: whole seconds unless CreatedAt is in epoch milliseconds", o.Window))
	case r.deadline.Column == "" && o.Window%time.Millisecond != 0:
		errs = append(errs, fmt.Errorf("sqlstore: mapping: Window %v: whole milliseconds", o.Window))
	}
	if o.CancelReason != "" {
		r.reason = id("cancel reason column", o.CancelReason, false)
	}
	if o.UpdatedAt.Column != "" {
		u := timeCol("updated-at column", o.UpdatedAt)
		r.updated, r.updatedType = u.Column, u.Type
	}
	if o.PaymentID != "" {
		r.payment = id("payment id column", o.PaymentID, false)
	}
	if o.Version != "" {
		r.version = id("version column", o.Version, false)
	}
	conds := func(what string, cs []Condition) []cond {
		var out []cond
		seen := map[string]bool{}
		for _, c := range cs {
			if seen[c.Column] {
				errs = append(errs, fmt.Errorf("sqlstore: mapping: %s condition on %s listed twice", what, c.Column))
			}
			seen[c.Column] = true
			col := id(what+" condition column", c.Column, false)
			if c.Value == IsNull {
				out = append(out, cond{name: c.Column, col: col, v: lit{sql: "NULL", key: "NULL"}, null: true})
				continue
			}
			v, err := literal(what+" condition on "+c.Column, c.Value)
			if err != nil {
				errs = append(errs, err)
			}
			out = append(out, cond{name: c.Column, col: col, v: v, exact: r.exactIDs && v.str})
		}
		return out
	}
	r.where = conds("orders", o.Where)
	// fills validates a table's Fill: constants (or HostWrites) for
	// columns its inserts do not write already (written: column → what
	// writes it), and returns them and the columns an insert then writes.
	fills := func(what string, cs []Condition, written map[string]string) (out []cond, host, writes []string) {
		seen := map[string]bool{}
		for col := range written {
			writes = append(writes, col)
		}
		for _, c := range cs {
			col := id(what+" fill column", c.Column, false)
			if seen[c.Column] {
				errs = append(errs, fmt.Errorf("sqlstore: mapping: %s fill of %s listed twice", what, c.Column))
			}
			seen[c.Column] = true
			if as, ok := written[c.Column]; ok {
				errs = append(errs, fmt.Errorf("sqlstore: mapping: %s fill of %s: Place writes it already (%s)", what, c.Column, as))
				continue
			}
			writes = append(writes, c.Column)
			var l lit
			switch v := c.Value.(type) {
			case hostValue:
				host = append(host, c.Column)
				continue
			case nullValue:
				errs = append(errs, fmt.Errorf("sqlstore: mapping: %s fill of %s: IsNull is a Where condition, a Fill writes a value (a nullable column needs none)", what, c.Column))
				continue
			case bool:
				l = lit{sql: "FALSE", key: "false", arg: v}
				if v {
					l.sql, l.key = "TRUE", "true"
				}
			default:
				if v == "" {
					l = lit{sql: "''", arg: "", str: true}
					break
				}
				var err error
				if l, err = literal(what+" fill of "+c.Column, c.Value); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			out = append(out, cond{name: c.Column, col: col, v: l})
		}
		return out, host, writes
	}
	written := map[string]string{}
	for col, as := range map[string]string{o.OrderNo: "the order number", o.UserID: "the user", o.ShowID: "the show", o.Status: "the status",
		o.Deadline.Column: "the deadline", o.CreatedAt.Column: "the creation time", o.UpdatedAt.Column: "the updated-at time"} {
		if col != "" {
			written[col] = as
		}
	}
	if r.defaultSchema {
		written["seats"], written["seat_limit"], written["lock_id"] = "the seats", "the seat limit", "the seat lock"
	}
	for _, c := range r.where {
		written[c.name] = "a Where condition"
	}
	r.fill, r.hostFill, r.writes = fills("orders", o.Fill, written)
	if o.WindowFrom != nil {
		if err := resolveWindow(r, o, id, conds); err != nil {
			errs = append(errs, err)
		}
	}
	if !r.defaultSchema {
		// The scope names the rows this store serves: its table (two
		// services on tables of their own are two scopes) and its
		// conditions, sorted, so one tenant's stores agree however their
		// Where is ordered.
		parts := make([]string, 0, len(r.where))
		for _, c := range r.where {
			parts = append(parts, c.name+"="+c.v.sql)
		}
		sort.Strings(parts)
		r.scope, r.scopeParts = o.Table, parts
		if len(parts) > 0 {
			r.scope = o.Table + "?" + strings.Join(parts, "&")
		}
		if o.Scope != "" {
			if badScope(o.Scope) {
				errs = append(errs, fmt.Errorf("sqlstore: mapping: Orders.Scope %q is not 1-255 bytes of printable ASCII", o.Scope))
			}
			// A scope that reads as this table's with a condition the Where
			// contradicts is another store's (a tenant's scope copied into
			// the wrong tenant's configuration): its records are not ours.
			if part, mine, ok := contradicts(o.Scope, o.Table, parts); ok {
				errs = append(errs, fmt.Errorf("sqlstore: mapping: Orders.Scope %q says %s where the Where says %s: it names another store's rows (I16)", o.Scope, part, mine))
			}
			r.scope = o.Scope
		}
		for _, p := range o.PreviousScopes {
			if p != "" && badScope(p) {
				errs = append(errs, fmt.Errorf("sqlstore: mapping: Orders.PreviousScopes: %q is not 0-255 bytes of printable ASCII", p))
			}
			if part, mine, ok := contradicts(p, o.Table, parts); ok {
				errs = append(errs, fmt.Errorf("sqlstore: mapping: Orders.PreviousScopes: %q says %s where the Where says %s: it names another store's rows (I16)", p, part, mine))
			}
			if p == r.scope {
				errs = append(errs, fmt.Errorf("sqlstore: mapping: Orders.PreviousScopes holds the store's own scope %q", p))
			}
		}
		r.previousScopes = slices.Clone(o.PreviousScopes)
	}

	// Statuses.
	r.statusOf = map[string]int{}
	var kindStr *bool
	status := func(what string, v any, kind int) lit {
		l, err := literal(what, v)
		if err != nil {
			errs = append(errs, err)
			return l
		}
		if kindStr == nil {
			kindStr = &l.str
		} else if *kindStr != l.str {
			errs = append(errs, fmt.Errorf("sqlstore: mapping: %s %v: statuses are all integers or all strings", what, v))
		}
		if prev, dup := r.statusOf[l.key]; dup && prev != kind {
			errs = append(errs, fmt.Errorf("sqlstore: mapping: %s %v means two statuses", what, v))
		}
		r.statusOf[l.key] = kind
		return l
	}
	st := o.Statuses
	r.pending = status("pending status", st.Pending, 0)
	if len(st.Paid) == 0 || len(st.Cancelled) == 0 {
		errs = append(errs, errors.New("sqlstore: mapping: Statuses need at least one paid and one cancelled value"))
	}
	for _, v := range st.Paid {
		r.paid = append(r.paid, status("paid status", v, 1))
	}
	for _, v := range st.Cancelled {
		r.cancelled = append(r.cancelled, status("cancelled status", v, 2))
	}
	for _, v := range st.Paying {
		// Kind 3 is expiry.StatusHost: every read and pass treats the
		// order as the host's; only a payment's compare-and-set takes it
		// (payable).
		r.paying = append(r.paying, status("paying status", v, int(expiry.StatusHost)))
	}
	r.by = map[cancel.Reason]lit{}
	for reason, v := range st.CancelledBy {
		l, err := literal("cancelled status for "+string(reason), v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if k, ok := r.statusOf[l.key]; !ok || k != 2 {
			errs = append(errs, fmt.Errorf("sqlstore: mapping: cancelled status %v for %q is not one of Cancelled", v, reason))
		}
		r.by[reason] = l
	}

	if c := m.Claims; c != nil {
		r.claims = true
		r.c = id("claims table", c.Table, true)
		r.cShow = id("claims show column", c.ShowID, false)
		r.cSeat = id("claims seat column", c.SeatID, false)
		r.cNo = id("claims order number column", c.OrderNo, false)
		state := func(what string, v any) *lit {
			if v == nil {
				return nil
			}
			l, err := literal(what, v)
			if err != nil {
				errs = append(errs, err)
			}
			return &l
		}
		if c.State != "" {
			r.cState = id("claims state column", c.State, false)
			r.cLocked = state("claims locked state", c.Locked)
			if r.cLocked == nil {
				errs = append(errs, errors.New("sqlstore: mapping: a claims State column needs its Locked value"))
			}
			r.cSold = state("claims sold state", c.Sold)
			r.cReleased = state("claims released state", c.Released)
		} else if c.Locked != nil || c.Sold != nil || c.Released != nil {
			errs = append(errs, errors.New("sqlstore: mapping: claim states without a claims State column"))
		}
		r.cWhere = conds("claims", c.Where)
		written := map[string]string{}
		for col, as := range map[string]string{c.ShowID: "the show", c.SeatID: "the seat", c.OrderNo: "the order number", c.State: "the state"} {
			if col != "" {
				written[col] = as
			}
		}
		for _, w := range r.cWhere {
			written[w.name] = "a Where condition"
		}
		r.cFill, r.cHostFill, r.cWrites = fills("claims", c.Fill, written)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// cancelStatus is the value a cancel for reason writes.
func (r *resolved) cancelStatus(reason cancel.Reason) any {
	if l, ok := r.by[reason]; ok {
		return l.arg
	}
	return r.cancelled[0].arg
}
