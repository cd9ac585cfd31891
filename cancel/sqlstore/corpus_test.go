package sqlstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/corpus"
)

// The corpus (internal/corpus): the order tables of public projects the
// mapping was not designed around, as their own DDL (or ORM) creates them,
// in testdata/corpus/<name>.<dialect>.sql (each file names its source).
// For each, TestCorpusMapping records what maps today, word for word:
//
//   - the nearest Mapping of the tables as shipped, and New's and Check's
//     answer to it;
//   - where the host can close the gap by adding to its own schema, what it
//     must add (columns, keys, a default the mapping cannot fill), Check's
//     answer before and after, and the first Place, which places;
//   - and the whole store suite on every schema that maps.
//
// The messages are asserted exactly, so this test fails when a gap closes
// or a message changes: update the entry (internal/corpus) and the table in
// README.md ("Corpus of public schemas").

// checkErrText is Check's error for problems (nil: none).
func checkErrText(problems []string) string {
	if problems == nil {
		return ""
	}
	return sqlstore.ErrMapping.Error() + ":\n  " + strings.Join(problems, "\n  ")
}

// assertErrText asserts err is want ("": no error), word for word.
func assertErrText(t *testing.T, want string, err error, what string) bool {
	t.Helper()
	if want == "" {
		return assert.NoError(t, err, what)
	}
	return assert.EqualError(t, err, want, what)
}

// TestCorpusMapping maps the store onto each corpus schema on MariaDB and
// PostgreSQL and asserts, word for word, what New and Check say of the
// tables as shipped and, where the host can add what is missing, of the
// tables with the additions; that the first Place places there (the NOT
// NULL columns without a default filled by the mapping); and, on every
// schema that maps, runs the whole store suite.
//
// mysql8 is MySQL's run with MySQL 8's statements (no DELETE … RETURNING,
// sqlstore.MySQL8) on MariaDB: the MySQL fixtures, mappings and messages.
func TestCorpusMapping(t *testing.T) {
	for _, e := range corpus.Entries {
		dialects := corpus.Dialects
		if mysql8Corpus[e.Name] {
			dialects = append(dialects[:len(dialects):len(dialects)], sqlstore.MySQL8)
		}
		for _, d := range dialects {
			t.Run(e.Name+"/"+string(d), func(t *testing.T) {
				t.Parallel()
				if d == sqlstore.MySQL8 {
					runCorpusEntry(t, e, sqlstore.MySQL, sqlstore.MySQL8)
					return
				}
				runCorpusEntry(t, e, d, d)
			})
		}
	}
}

// mysql8Corpus are the entries whose mapping also runs with MySQL 8's
// statements (no RETURNING): one with a window in a settings row and a
// soft-delete flag, one with an integer order number. TestMySQL8 runs the whole suite
// with them on the library's own tables; every entry on them would add a
// third of the corpus's time to each run for the same statements.
var mysql8Corpus = map[string]bool{"mall": true, "saleor": true}

// runCorpusEntry runs e's fixtures, mappings and messages of d on a store
// of dialect sd (d, or MySQL8 for MySQL).
func runCorpusEntry(t *testing.T, e corpus.Entry, d, sd sqlstore.Dialect) {
	t.Logf("%s: %s", e.Name, e.Source)
	ctx := context.Background()
	db := openDB(t, d)
	shipped, err := corpus.DDL(e.Name, d)
	require.NoError(t, err)
	applyDDL(t, db, shipped)

	s, err := sqlstore.New(db, sd, e.Mapping(d))
	if !assertErrText(t, strings.Join(e.NewErr, "\n"), err, "New, the shipped tables") {
		return
	}
	if err == nil {
		t.Cleanup(func() { s.Close() })
		require.NoError(t, s.Migrate(ctx))
		if !assertErrText(t, checkErrText(e.CheckErr[d]), s.Check(ctx), "Check, the shipped tables") {
			return
		}
	}
	a := e.Adds
	if a == nil && (err != nil || e.CheckErr[d] != nil) {
		return // cannot map: the messages above say why
	}
	if a != nil {
		s, err = sqlstore.New(db, sd, e.Final(d))
		require.NoError(t, err, "New, the mapping with the additions")
		t.Cleanup(func() { s.Close() })
		require.NoError(t, s.Migrate(ctx))
		if !assertErrText(t, checkErrText(a.Before[d]), s.Check(ctx), "Check, the additions' mapping on the shipped tables") {
			return
		}
		applyDDL(t, db, a.DDL(d))
		if !assertErrText(t, checkErrText(a.After[d]), s.Check(ctx), "Check, with the additions") || a.After[d] != nil {
			return
		}
	}

	m := e.Final(d)
	tr := corpusIDs(m)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	p := tr.Placement(cancel.Placement{OrderNo: "corpus-1", UserID: "u1", ShowID: "show-1", Seats: []string{"A1"}, ExpireAt: now.Add(time.Hour)})
	if !assert.NoError(t, placeTx(t, db, s, p), "the first Place, once Check passes") {
		return
	}

	if e.Translated == d {
		t.Logf("%s ships no %s schema: the store suite runs on the one it ships (the model test runs on this translation)", e.Name, d)
		return
	}
	hs := hostSchema{
		name:    e.Name,
		mapping: m,
		ddl: func(d sqlstore.Dialect) []string {
			full, err := e.FullDDL(d)
			require.NoError(t, err)
			return full
		},
		caseFolding: e.CaseFolding,
		resolution:  time.Second,
	}
	canceltest.RunStore(t, func(t *testing.T) canceltest.StoreHarness {
		return corpusHarness(t, d, sd, hs)
	})
}

// corpusIDs is the view of a store of mapping m with the suite's ids: its
// numeric id columns see numbers (corpus.IDs), one bijection per column.
func corpusIDs(m sqlstore.Mapping) corpus.Translated {
	var tr corpus.Translated
	if m.Orders.NumericUserID {
		tr.Users = &corpus.IDs{}
	}
	if m.Orders.NumericShowID {
		tr.Shows = &corpus.IDs{}
	}
	if m.Orders.NumericOrderNo {
		tr.Orders = &corpus.IDs{}
	}
	return tr
}

// corpusHarness is hostHarness seen through the suite's ids (corpusIDs),
// on a store of dialect sd over hs's tables in d.
func corpusHarness(t *testing.T, d, sd sqlstore.Dialect, hs hostSchema) canceltest.StoreHarness {
	ctx := context.Background()
	db := openDB(t, d)
	applyDDL(t, db, hs.ddl(d))
	s, err := sqlstore.New(db, sd, hs.mapping)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Check(ctx), "the host's tables match the mapping")
	tr := corpusIDs(hs.mapping)
	store := tr.View(s, corpus.CanReinstate(hs.mapping), hs.mapping.Orders.Deadline.Column != "")
	return canceltest.StoreHarness{
		Store: store,
		Now:   s.Now,
		Place: func(ctx context.Context, p cancel.Placement) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := s.Place(ctx, tx, tr.Placement(p)); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		CaseFoldingKeys: hs.caseFolding && d == sqlstore.MySQL,
		Resolution:      hs.resolution,
		WriteResolution: time.Second,
		NoWriteTime:     hs.mapping.Orders.UpdatedAt.Column == "",
		NoClaims:        hs.mapping.Claims == nil,
	}
}

// TestCorpusDDLSplits: every corpus file parses into statements, so a
// fixture with a stray ";" fails here, not as a confusing SQL error.
func TestCorpusDDLSplits(t *testing.T) {
	for _, e := range corpus.Entries {
		for _, d := range corpus.Dialects {
			stmts, err := corpus.DDL(e.Name, d)
			require.NoError(t, err)
			require.NotEmpty(t, stmts, "%s.%s.sql", e.Name, d)
			for _, q := range stmts {
				if !strings.HasPrefix(q, "CREATE ") && !strings.HasPrefix(q, "INSERT ") {
					t.Errorf("%s.%s.sql: not a CREATE or INSERT: %s", e.Name, d, q)
				}
			}
		}
	}
}
