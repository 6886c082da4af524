package workerproc

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/effectively/effectively/tools/testenv"
)

// TestDefaultWorkerHasNoFailpoints builds the worker as it ships and as the
// crash tests build it, and reads both binaries' symbol tables: the shipped
// one must hold no failpoint code, nor the name of the variable that arms
// it, so no environment can turn a production worker into one that kills
// itself. The tagged build is the control that shows the check can fail.
func TestDefaultWorkerHasNoFailpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the worker twice")
	}
	ctx := context.Background()
	root := testenv.RepoRoot()

	shipped, err := Build(ctx, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if syms := failpointSymbols(t, shipped); len(syms) > 0 {
		t.Errorf("the default worker binary holds failpoint symbols:\n%s", strings.Join(syms, "\n"))
	}
	if bytes.Contains(readFile(t, shipped), []byte("EFFECTIVELY_FAILPOINTS")) {
		t.Error("the default worker binary contains the string EFFECTIVELY_FAILPOINTS")
	}

	tagged, err := Build(ctx, root, t.TempDir(), FailpointsTag)
	if err != nil {
		t.Fatal(err)
	}
	if syms := failpointSymbols(t, tagged); len(syms) == 0 {
		t.Error("the worker built with -tags failpoints has no failpoint symbols: the check above proves nothing")
	}
}

// failpointSymbols lists the symbols of package internal/leaf/failpoint in bin,
// read with go tool nm.
func failpointSymbols(t *testing.T, bin string) []string {
	t.Helper()
	out, err := exec.CommandContext(context.Background(), "go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	var syms []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "effectively/internal/leaf/failpoint.") {
			syms = append(syms, strings.TrimSpace(line))
		}
	}
	return syms
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestShippedBinariesImportNoTooling lists what the worker and the starter
// are built from: none of it may come from tools/ (the bench, the soak, the
// local stack, the test harness), which is free to import anything.
func TestShippedBinariesImportNoTooling(t *testing.T) {
	cmd := exec.CommandContext(context.Background(), "go", "list", "-deps", "./worker", "./starter")
	cmd.Dir = testenv.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var product int
	for _, pkg := range strings.Fields(string(out)) {
		if !strings.HasPrefix(pkg, "github.com/effectively/effectively") {
			continue
		}
		product++
		if strings.Contains(pkg, "/tools/") {
			t.Errorf("a shipped binary imports tooling package %s", pkg)
		}
	}
	if product < 5 {
		t.Fatalf("go list found only %d of the project's packages:\n%s", product, out)
	}
}
