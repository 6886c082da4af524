package deploy

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runTestDeps runs tools/test-deps.sh in report-only mode, searching only
// path for programs, and returns its exit code and standard error.
func runTestDeps(t *testing.T, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repoRoot(t), "tools", "test-deps.sh")) //nolint:gosec // the repository's own script
	cmd.Env = append(os.Environ(), "TEST_DEPS_DRY_RUN=1", "TEST_DEPS_PATH="+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stderr.String()
	default:
		t.Fatalf("run test-deps.sh: %v", err)
		return 0, ""
	}
}

// TestTestDepsNamesWhatIsMissing: on a machine without the programs the
// tests run, `make test` stops before any test with the one command that
// installs every missing package.
func TestTestDepsNamesWhatIsMissing(t *testing.T) {
	code, stderr := runTestDeps(t, t.TempDir())
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	want := "apt-get install -y --no-install-recommends nats-server prometheus chromium rabbitmq-server linux-perf"
	if !strings.Contains(stderr, want) {
		t.Fatalf("stderr does not name the install command %q:\n%s", want, stderr)
	}
}

// TestTestDepsSatisfied: `make test` ran the script before this test, so
// with the machine's own PATH it finds everything and the services up.
func TestTestDepsSatisfied(t *testing.T) {
	path := os.Getenv("PATH") + ":/usr/sbin:/usr/local/sbin"
	if code, stderr := runTestDeps(t, path); code != 0 {
		t.Fatalf("exit %d, want 0 after make test-deps; stderr:\n%s", code, stderr)
	}
}

// TestMakeTestRunsTestDeps: the README's test command and CI install the
// same things, through one step.
func TestMakeTestRunsTestDeps(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(repoRoot(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var testLine string
	for _, l := range strings.Split(string(mk), "\n") {
		if strings.HasPrefix(l, "test:") {
			testLine = l
		}
	}
	if !strings.Contains(strings.SplitN(testLine, "##", 2)[0], "test-deps") {
		t.Fatalf("the Makefile's test target does not depend on test-deps: %q", testLine)
	}
	ci, err := os.ReadFile(filepath.Join(repoRoot(t), ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ci), "make test-deps") || strings.Contains(string(ci), "apt-get") {
		t.Fatal(".ci/run must install through `make test-deps`, with no package list of its own")
	}
}
