package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

// loadMapping reads the service's sqlstore.Mapping from a JSON file, the
// struct as Go spells it ({"Orders": {"Table": "order_info", …},
// "Claims": {…}}), with these conveniences over encoding/json: numbers are
// integers (a status 0, never 0.0), a Where condition's "Value": null is
// sqlstore.IsNull, a Fill's "Value": null is sqlstore.HostWrites (the
// service's own insert writes the column), and Window and WindowFrom's Unit may be Go durations
// ("30m") and a time column's Type a name ("epoch_millis",
// "epoch_seconds", "datetime_utc", "timestamp").
func loadMapping(path string) (sqlstore.Mapping, error) {
	var m sqlstore.Mapping
	b, err := os.ReadFile(path)
	if err != nil {
		return m, fmt.Errorf("-mapping: %w", err)
	}
	var raw any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return m, fmt.Errorf("-mapping %s: %w", path, err)
	}
	if err := friendly(raw); err != nil {
		return m, fmt.Errorf("-mapping %s: %w", path, err)
	}
	b, err = json.Marshal(raw)
	if err != nil {
		return m, fmt.Errorf("-mapping %s: %w", path, err)
	}
	dec = json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	dec.DisallowUnknownFields() // a misspelt field is an error, not a column left out
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("-mapping %s: %w", path, err)
	}
	if err := integers(&m); err != nil {
		return m, fmt.Errorf("-mapping %s: %w", path, err)
	}
	return m, nil
}

// timeTypes are the names a time column's Type may have in the file.
var timeTypes = map[string]sqlstore.TimeType{
	"epoch_millis": sqlstore.EpochMillis, "epoch_seconds": sqlstore.EpochSeconds,
	"datetime_utc": sqlstore.DateTimeUTC, "timestamp": sqlstore.Timestamp,
}

// friendly rewrites durations and time type names into what
// encoding/json decodes (nanoseconds, the TimeType's number).
func friendly(v any) error {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			s, isString := e.(string)
			switch {
			case isString && (k == "Window" || k == "Unit"):
				d, err := time.ParseDuration(s)
				if err != nil {
					return fmt.Errorf("%s: %w", k, err)
				}
				x[k] = json.Number(strconv.FormatInt(int64(d), 10))
			case isString && k == "Type":
				t, ok := timeTypes[s]
				if !ok {
					return fmt.Errorf("Type %q: want epoch_millis, epoch_seconds, datetime_utc or timestamp", s)
				}
				x[k] = json.Number(strconv.Itoa(int(t)))
			default:
				if err := friendly(e); err != nil {
					return err
				}
			}
		}
	case []any:
		for _, e := range x {
			if err := friendly(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// integers turns the JSON numbers of m's values into int64, a
// condition's null into sqlstore.IsNull and a fill's into
// sqlstore.HostWrites.
func integers(m *sqlstore.Mapping) error {
	var errs []error
	fix := func(v *any) {
		if n, ok := (*v).(json.Number); ok {
			i, err := n.Int64()
			if err != nil {
				errs = append(errs, fmt.Errorf("value %s: not an integer", n))
			}
			*v = i
		}
	}
	where := func(cs []sqlstore.Condition) {
		for i := range cs {
			if cs[i].Value == nil {
				cs[i].Value = sqlstore.IsNull
			}
			fix(&cs[i].Value)
		}
	}
	fill := func(cs []sqlstore.Condition) {
		for i := range cs {
			if cs[i].Value == nil {
				cs[i].Value = sqlstore.HostWrites
			}
			fix(&cs[i].Value)
		}
	}
	st := &m.Orders.Statuses
	fix(&st.Pending)
	for i := range st.Paid {
		fix(&st.Paid[i])
	}
	for i := range st.Cancelled {
		fix(&st.Cancelled[i])
	}
	by := map[cancel.Reason]any{}
	for r, v := range st.CancelledBy {
		fix(&v)
		by[r] = v
	}
	if st.CancelledBy != nil {
		st.CancelledBy = by
	}
	where(m.Orders.Where)
	fill(m.Orders.Fill)
	if w := m.Orders.WindowFrom; w != nil {
		where(w.Where)
	}
	if c := m.Claims; c != nil {
		fix(&c.Locked)
		fix(&c.Sold)
		fix(&c.Released)
		where(c.Where)
		fill(c.Fill)
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}
