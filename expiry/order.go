package expiry

import (
	"errors"
	"fmt"
	"time"
)

// Status is an order's state. Pending is the only state an order leaves, and
// it leaves it once: to Paid or to Cancelled (invariant I1).
//
// StatusHost is none of them: the order's row holds a status value the
// store's mapping does not name (the host's own: an operator's hold, an
// offline payment awaited), so the order is not the library's while it
// stays there (invariant I19). The library changes nothing of it: a
// timeout, a user's cancel and the reconciler leave it and its seats as
// they are, and a payment for it cannot be taken (package cancel refunds it
// as a discrepancy). Only the host moves an order into or out of it; once
// the row holds one of the mapping's values again, the order is the
// library's again.
type Status uint8

// The order states, with the values the SQL schema stores.
const (
	StatusPending   Status = 0
	StatusPaid      Status = 1
	StatusCancelled Status = 2
	// StatusHost: a status the host owns (see Status). The library's own
	// schema never writes it; a discrepancy of a payment for such an order
	// is recorded with it.
	StatusHost Status = 3
)

// String returns "pending", "paid", "cancelled", "host" or "status(N)".
func (s Status) String() string {
	switch s {
	case StatusPending:
		return "pending"
	case StatusPaid:
		return "paid"
	case StatusCancelled:
		return "cancelled"
	case StatusHost:
		return "host"
	default:
		return fmt.Sprintf("status(%d)", uint8(s))
	}
}

// Order is what the Handler needs to know of an order.
type Order struct {
	No     string
	UserID string
	ShowID string
	Status Status
	// ExpireAt is the order's deadline. The zero time means the order has
	// none now (a host's nullable deadline column that holds NULL, a window
	// setting that is not a number): it is never due until it gets one, its
	// expiry message is final (the Handler acknowledges it), and the
	// reconciler's expired pass cancels it once it is due.
	ExpireAt time.Time
	// ReadAt is the store's clock when the order was read. Remaining time is
	// measured against it, never against the application host's clock, so a
	// host whose clock runs ahead cannot cancel an order early (invariant I4).
	ReadAt time.Time
}

// Remaining returns how long the order still has before it is due, by the
// store's clock; zero or negative means due. Meaningless for an order
// without a deadline (ExpireAt zero): check ExpireAt.IsZero first.
func (o Order) Remaining() time.Duration { return o.ExpireAt.Sub(o.ReadAt) }

// ErrNotFound reports that no order has the given number.
var ErrNotFound = errors.New("orderexpiry: order not found")

// ErrInvalidID reports an order number, user, show or seat id that is not
// acceptable; see ValidateID.
var ErrInvalidID = errors.New("orderexpiry: invalid id")

// MaxIDLen is the longest id ValidateID accepts.
const MaxIDLen = 64

// ValidateID checks an order number, user id, show id or seat id: 1 to
// MaxIDLen bytes of ASCII letters, digits, '-', '_', '.', '@' and '+' (a
// buyer some ticketing systems know by email alone: ann.buyer+tix@example.com).
// Anything else (braces that would steer a Redis hash tag, separators,
// quotes, NUL, spaces, non-ASCII) is rejected with an error wrapping
// ErrInvalidID, so ids can be used in keys, message bodies and logs without
// escaping. Ids match byte for byte everywhere (I10): an email's case
// variant is another id.
func ValidateID(kind, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalidID, kind)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: %s is %d bytes, longer than %d", ErrInvalidID, kind, len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if !idByte(id[i]) {
			return fmt.Errorf("%w: %s %q has a byte %q at %d (allowed: A-Z a-z 0-9 - _ . @ +)", ErrInvalidID, kind, id, id[i], i)
		}
	}
	return nil
}

func idByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '@' || c == '+'
}
