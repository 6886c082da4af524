package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"
)

// MigrateCommand is the command that applies the migrations, named in the
// error a process that only reads gives when the schema is behind.
const MigrateCommand = "worker migrate"

// ErrSchemaBehind reports a database whose schema is missing or older than
// the one this binary was built for; *SchemaError holds the versions.
var ErrSchemaBehind = errors.New("database schema is behind")

// SchemaError describes a schema that is missing (Have 0) or older than the
// migrations embedded in this binary (Want).
type SchemaError struct {
	// Have is the newest migration applied, Want the newest embedded.
	Have, Want int64
	// Missing are the embedded migrations not applied.
	Missing []int64
}

// Error says what was found and names the command that fixes it.
func (e *SchemaError) Error() string {
	if e.Have == 0 {
		return fmt.Sprintf("the database has no effectively schema (this binary needs version %d): run `%s` with the same DATABASE_URL", e.Want, MigrateCommand)
	}
	if e.Have >= e.Want {
		return fmt.Sprintf("the database schema lacks migrations %v that this binary needs: run `%s` with the same DATABASE_URL", e.Missing, MigrateCommand)
	}
	return fmt.Sprintf("the database schema is at version %d, this binary needs %d: run `%s` with the same DATABASE_URL", e.Have, e.Want, MigrateCommand)
}

// Unwrap makes errors.Is(err, ErrSchemaBehind) true.
func (e *SchemaError) Unwrap() error { return ErrSchemaBehind }

// SchemaVersion is the newest migration embedded in this binary.
func SchemaVersion() int64 {
	versions := embeddedVersions()
	return versions[len(versions)-1]
}

// embeddedVersions lists the versions of the embedded migrations, ascending.
func embeddedVersions() []int64 {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		panic(err) // the pattern is valid
	}
	var vs []int64
	for _, name := range names {
		n, err := goose.NumericComponent(name)
		if err != nil {
			panic(fmt.Sprintf("migration %s: %v", name, err)) // embedded at build time, applied by every test database
		}
		vs = append(vs, n)
	}
	slices.Sort(vs)
	return vs
}

// CheckSchema returns a *SchemaError when the database's schema is missing,
// or lacks a migration embedded in this binary (an older schema, or one
// migrated by a binary that did not have it). It only reads (the goose
// version table), so a read-only role can run it, and it never changes the
// schema: that is Migrate's job, run by the worker. Migrations the binary
// does not know are accepted: migrations add, so an older binary keeps
// working while a newer worker rolls out.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	want := embeddedVersions()
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, goose.DefaultTablename).Scan(&exists); err != nil {
		return fmt.Errorf("check schema: %w", translate(err))
	}
	if !exists {
		return &SchemaError{Want: want[len(want)-1]}
	}
	rows, err := pool.Query(ctx, `SELECT DISTINCT version_id FROM `+goose.DefaultTablename+` WHERE is_applied AND version_id > 0`)
	if err != nil {
		return fmt.Errorf("check schema version: %w", translate(err))
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("check schema version: %w", translate(err))
	}
	e := &SchemaError{Want: want[len(want)-1]}
	for _, v := range applied {
		e.Have = max(e.Have, v)
	}
	for _, v := range want {
		if !slices.Contains(applied, v) {
			e.Missing = append(e.Missing, v)
		}
	}
	if len(e.Missing) > 0 {
		return e
	}
	return nil
}

// CheckReady reports whether Postgres answers and carries every migration
// this binary expects (CheckSchema): the worker's /readyz check.
func (s *Store) CheckReady(ctx context.Context) error {
	return CheckSchema(ctx, s.pool)
}
