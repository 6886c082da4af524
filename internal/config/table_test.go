package config

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// recorder is an empty environment that records what is looked up.
type recorder struct {
	read map[string]bool
}

func (r *recorder) LookupEnv(name string) (string, bool) {
	r.read[name] = true
	return "", false
}

func (r *recorder) Environ() []string {
	r.read[GRPCMetaPrefix+"*"] = true
	return nil
}

// TestTableIsWhatLoadEnvReads holds the table of variables to what LoadEnv
// looks up, the other loaders (envconfig, keyring, NATS authentication)
// included: a variable read but not in the table, or in the table but never
// read, fails.
func TestTableIsWhatLoadEnvReads(t *testing.T) {
	r := &recorder{read: map[string]bool{}}
	_, _ = LoadEnv(r) // an empty environment: every variable is looked up, none set
	names := Names()
	for n := range r.read {
		if !slices.Contains(names, n) {
			t.Errorf("LoadEnv reads %s, which the table of variables (variables.go) lacks", n)
		}
	}
	for _, n := range names {
		if !r.read[n] {
			t.Errorf("the table of variables lists %s, which LoadEnv never reads", n)
		}
	}
	seen := map[string]bool{}
	for i, v := range variables {
		if seen[v.name] {
			t.Errorf("the table lists %s twice", v.name)
		}
		seen[v.name] = true
		if i == 0 && v.doc == "" || v.load == nil && v.check != nil {
			t.Errorf("%s: a row needs a doc line, and a check needs a loader", v.name)
		}
	}
}

// docTable is the table under "## Variables" in docs/configuration.md, as
// the table of variables gives it: a row per variable with a doc line,
// followed by the variables without one.
func docTable() string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	for i := 0; i < len(variables); {
		row := []variable{variables[i]}
		for i++; i < len(variables) && variables[i].doc == ""; i++ {
			row = append(row, variables[i])
		}
		names, defs := make([]string, len(row)), make([]string, 0, len(row))
		for j, v := range row {
			names[j] = "`" + v.name + "`"
			switch {
			case v.docDefault != "":
				defs = append(defs, v.docDefault)
			case v.def != "":
				defs = append(defs, "`"+v.def+"`")
			}
		}
		b.WriteString("| " + strings.Join(names, ", ") + " | " + strings.Join(defs, ", ") + " | " + row[0].doc + " |\n")
	}
	return b.String()
}

// TestConfigurationDocIsGenerated fails when docs/configuration.md's table
// of variables is not the one the table of variables gives; with
// UPDATE_CONFIG_DOC=1 it rewrites the table instead.
func TestConfigurationDocIsGenerated(t *testing.T) {
	const path = "../../docs/configuration.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	const header = "| variable | default | meaning |\n"
	start := strings.Index(doc, header)
	if start < 0 {
		t.Fatalf("%s has no table of variables", path)
	}
	end := strings.Index(doc[start:], "\n\n")
	if end < 0 {
		t.Fatalf("%s: the table of variables does not end", path)
	}
	end += start + 1
	want := docTable()
	if doc[start:end] == want {
		return
	}
	if os.Getenv("UPDATE_CONFIG_DOC") == "1" {
		if err := os.WriteFile(path, []byte(doc[:start]+want+doc[end:]), 0o600); err != nil { //nolint:gosec // G703: path is a constant
			t.Fatal(err)
		}
		t.Logf("rewrote the table of variables in %s", path)
		return
	}
	t.Errorf("%s's table of variables is stale: run UPDATE_CONFIG_DOC=1 go test ./internal/config -run TestConfigurationDocIsGenerated\ngot:\n%s\nwant:\n%s", path, doc[start:end], want)
}

// TestShutdownTimeouts: the effects get three quarters of the drain
// timeout, the Temporal worker's stop the last quarter.
func TestShutdownTimeouts(t *testing.T) {
	c, err := Load(env(map[string]string{}))
	if err != nil {
		t.Fatal(err)
	}
	effects, stop := c.ShutdownTimeouts()
	if effects != 15*time.Second || stop != 5*time.Second {
		t.Errorf("default drain: effects %s, worker stop %s; want 15s and 5s", effects, stop)
	}
}
