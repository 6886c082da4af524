package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/tools/storetest"
)

// TestQuickStartMatchesREADME runs what `make demo` runs and checks that
// every line of the README's "Expect:" block appears in its output, in
// order; "..." in the README stands for lines not shown. IDs, ports and
// timestamps are masked on both sides.
func TestQuickStartMatchesREADME(t *testing.T) {
	t.Setenv("DATABASE_URL", "") // devstack's own database, named by the instance
	var b [4]byte
	_, _ = rand.Read(b[:])
	instance := "qs" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		dropDatabase(t, "effectively_"+instance)
		deleteStreams(t, "EFFECTIVELY_"+strings.ToUpper(instance))
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, options{examples: "examples/orders.jsonl", exit: true, stateDir: t.TempDir(), instance: instance}, &out)
	if err != nil {
		t.Fatalf("devstack: %v\n%s", err, out.String())
	}
	// The demo's streams are named by its instance; the README's by "dev".
	got := strings.ReplaceAll(out.String(), "EFFECTIVELY_"+strings.ToUpper(instance), "EFFECTIVELY_DEV")

	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := expectBlock(t, string(readme))
	lines := strings.Split(mask(got), "\n")
	i := 0
	for _, w := range strings.Split(mask(want), "\n") {
		if strings.TrimSpace(w) == "..." || strings.TrimSpace(w) == "" {
			continue
		}
		for i < len(lines) && strings.TrimRight(lines[i], " ") != strings.TrimRight(w, " ") {
			i++
		}
		if i == len(lines) {
			t.Fatalf("the README's line\n  %s\nis not in the demo's output (in order):\n%s", w, got)
		}
		i++
	}
}

// expectBlock returns the first fenced block after "Expect:" in the README.
func expectBlock(t *testing.T, readme string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "Expect:\n\n```\n")
	if !ok {
		t.Fatal(`README has no "Expect:" block`)
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("README's Expect: block is not closed")
	}
	return block
}

var masks = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`pi_[A-Za-z0-9]+`), "pi_…"},
	{regexp.MustCompile(`^time=\S+`), "time=…"},
	{regexp.MustCompile(`127\.0\.0\.1:\d+`), "127.0.0.1:…"},
	{regexp.MustCompile(`Bearer dev_[0-9a-f]+`), "Bearer dev_…"}, // a fresh token per run
	{regexp.MustCompile(`-d '\{.*\}'`), "-d '…'"},
	{regexp.MustCompile(` +`), " "}, // table columns widen with the IDs
}

func mask(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		for _, m := range masks {
			l = m.re.ReplaceAllString(l, m.with)
		}
		lines[i] = l
	}
	return strings.Join(lines, "\n")
}

func deleteStreams(t *testing.T, stream string) {
	nc, err := nats.Connect(nats.DefaultURL, nats.Timeout(2*time.Second))
	if err != nil {
		t.Errorf("delete streams %s: %v", stream, err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Errorf("delete streams %s: %v", stream, err)
		return
	}
	for _, name := range []string{stream, stream + "_EVENTS"} {
		if err := js.DeleteStream(context.Background(), name); err != nil {
			t.Errorf("delete stream %s: %v", name, err)
		}
	}
}

func dropDatabase(t *testing.T, name string) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, storetest.AdminURL())
	if err != nil {
		t.Errorf("drop %s: %v", name, err)
		return
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("drop %s: %v", name, err)
	}
}
