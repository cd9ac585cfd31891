package sqlstore

// ExtendSQL and ExtendArgs give the external tests a deadline extension's
// compare-and-set on a host's table, to run it as a race between SetDeadline's
// read and its write would (TestProbeFixedLateStatusCaseFolds).
func ExtendSQL(s *Store) string { return s.q.extend.sql }

// ExtendArgs are ExtendSQL's arguments: the new deadline in the column's unit,
// the deadline read (ms), the target (ms).
func ExtendArgs(s *Store, orderNo string, deadline any, prevMS, targetMS int64) []any {
	return s.args(s.q.extend, vals{no: orderNo, deadline: deadline, prevMS: prevMS, targetMS: targetMS})
}
