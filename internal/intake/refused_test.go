package intake_test

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectively/effectively/internal/intake"
)

// TestRefusedTellsARefusalFromAnOutage: only Postgres' answer to the
// statement itself lets a held last delivery be quarantined; an error of
// reaching it, or a transient answer, keeps it held for the record.
func TestRefusedTellsARefusalFromAnOutage(t *testing.T) {
	tests := map[string]struct {
		err  error
		want bool
	}{
		"a raised exception (a trigger)":   {&pgconn.PgError{Code: "P0001"}, true},
		"a check violation, wrapped":       {fmt.Errorf("record message m: %w", &pgconn.PgError{Code: "23514"}), true},
		"an undefined table (a migration)": {&pgconn.PgError{Code: "42P01"}, true},
		"a closed connection":              {fmt.Errorf("insert 1 inbox rows: %w", net.ErrClosed), false},
		"a connection failure":             {&pgconn.PgError{Code: "08006"}, false},
		"a deadlock":                       {&pgconn.PgError{Code: "40P01"}, false},
		"too many connections":             {&pgconn.PgError{Code: "53300"}, false},
		"an admin shutdown":                {&pgconn.PgError{Code: "57P01"}, false},
		"a statement timeout":              {&pgconn.PgError{Code: "57014"}, false},
		"a plain error":                    {errors.New("context deadline exceeded"), false},
	}
	for name, tt := range tests {
		if got := intake.Refused(tt.err); got != tt.want {
			t.Errorf("%s (%v): refused = %v, want %v", name, tt.err, got, tt.want)
		}
	}
}
