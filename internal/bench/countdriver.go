package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// counts are the driver calls that each cost the client one round trip to
// the server (a go-sql-driver COM_STMT_CLOSE expects no answer and is not
// counted; pgx's statement cache prepares once per connection and SQL text,
// invisibly, and is not counted either).
type counts struct {
	begin, commit, rollback, exec, query, prepare, stmtExec, stmtQuery atomic.Int64
	lastSQL                                                            atomic.Pointer[string]              // text of the last query or prepare
	lastArgs                                                           atomic.Pointer[[]driver.NamedValue] // arguments of the last query
}

func (c *counts) total() int64 {
	return c.begin.Load() + c.commit.Load() + c.rollback.Load() + c.exec.Load() + c.query.Load() + c.prepare.Load() + c.stmtExec.Load() + c.stmtQuery.Load()
}

func (c *counts) String() string {
	return fmt.Sprintf("begin %d, commit %d, exec %d, query %d, prepare %d, stmt exec %d, stmt query %d",
		c.begin.Load(), c.commit.Load(), c.exec.Load(), c.query.Load(), c.prepare.Load(), c.stmtExec.Load(), c.stmtQuery.Load())
}

func (c *counts) reset() {
	for _, v := range []*atomic.Int64{&c.begin, &c.commit, &c.rollback, &c.exec, &c.query, &c.prepare, &c.stmtExec, &c.stmtQuery} {
		v.Store(0)
	}
}

// countingDB opens a second pool on bd's database whose driver calls are
// counted.
func countingDB(bd *benchDB) (*sql.DB, *counts, error) {
	var inner driver.Connector
	switch bd.engine {
	case engMySQL:
		cfg, err := mysql.ParseDSN(bd.dsn)
		if err != nil {
			return nil, nil, err
		}
		inner, err = mysql.NewConnector(cfg)
		if err != nil {
			return nil, nil, err
		}
	default:
		cfg, err := pgx.ParseConfig(bd.dsn)
		if err != nil {
			return nil, nil, err
		}
		inner = stdlib.GetConnector(*cfg)
	}
	c := &counts{}
	db := sql.OpenDB(countConnector{inner, c})
	pool(db, 4)
	return db, c, nil
}

type countConnector struct {
	driver.Connector
	c *counts
}

func (cc countConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := cc.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countConn{conn, cc.c}, nil
}

type countConn struct {
	driver.Conn
	c *counts
}

func (c *countConn) Prepare(q string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), q)
}

func (c *countConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	c.c.prepare.Add(1)
	c.c.lastSQL.Store(&q)
	var s driver.Stmt
	var err error
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		s, err = p.PrepareContext(ctx, q)
	} else {
		s, err = c.Conn.Prepare(q)
	}
	if err != nil {
		return nil, err
	}
	return &countStmt{s, c.c, c.Conn}, nil
}

func (c *countConn) Begin() (driver.Tx, error) { //nolint:staticcheck // required by driver.Conn
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *countConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.c.begin.Add(1)
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return countTx{tx, c.c}, nil
}

func (c *countConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := e.ExecContext(ctx, q, args)
	if err != driver.ErrSkip {
		c.c.exec.Add(1)
	}
	return r, err
}

func (c *countConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	e, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := e.QueryContext(ctx, q, args)
	if err != driver.ErrSkip {
		c.c.query.Add(1)
		c.c.lastSQL.Store(&q)
		c.c.lastArgs.Store(&args)
	}
	return r, err
}

func (c *countConn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := c.Conn.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *countConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *countConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *countConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

type countTx struct {
	driver.Tx
	c *counts
}

func (t countTx) Commit() error   { t.c.commit.Add(1); return t.Tx.Commit() }
func (t countTx) Rollback() error { t.c.rollback.Add(1); return t.Tx.Rollback() }

type countStmt struct {
	driver.Stmt
	c    *counts
	conn driver.Conn
}

func (s *countStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.stmtExec.Add(1)
	if e, ok := s.Stmt.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	vals := make([]driver.Value, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	return s.Stmt.Exec(vals) //nolint:staticcheck // fallback
}

func (s *countStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.stmtQuery.Add(1)
	s.c.lastArgs.Store(&args)
	if q, ok := s.Stmt.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	vals := make([]driver.Value, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	return s.Stmt.Query(vals) //nolint:staticcheck // fallback
}

func (s *countStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	if n, ok := s.conn.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}
