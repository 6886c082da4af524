package config

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestOnlyConfigReadsTheEnvironment reads the source of every package the
// worker and the starter are built from (the default build, without test
// tags) and fails on any environment read outside this package.
func TestOnlyConfigReadsTheEnvironment(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f",
		`{{if not .Standard}}{{.ImportPath}}|{{.Dir}}|{{join .GoFiles ","}}{{end}}`,
		"../../worker", "../../starter").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	reads := regexp.MustCompile(`\bos\.(Getenv|LookupEnv|Environ|ExpandEnv)\b|envconfig\.(LoadDefaultClientOptions|MustLoadDefaultClientOptions|EnvLookupOS)\b`)
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.Split(line, "|")
		if len(parts) != 3 || !strings.HasPrefix(parts[0], "github.com/effectively/effectively") {
			continue
		}
		if strings.HasSuffix(parts[0], "/internal/config") {
			continue
		}
		for _, f := range strings.Split(parts[2], ",") {
			if f == "" {
				continue
			}
			src, err := os.ReadFile(filepath.Join(parts[1], f))
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for i, l := range strings.Split(string(src), "\n") {
				if m := reads.FindString(l); m != "" && !strings.HasPrefix(strings.TrimSpace(l), "//") {
					t.Errorf("%s/%s:%d reads the environment (%s): read it in internal/config instead", parts[0], f, i+1, m)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d files: go list output %q", checked, out)
	}
}
