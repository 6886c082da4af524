package layout

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"
)

const module = "github.com/effectively/effectively/"

// floors puts every product package on a floor. A package may import the
// packages of lower floors; the edges within a floor are listed in
// sameFloor, and those that skip down but are still wrong in denied. A new
// package must be placed here, so the rules are read before it is written.
var floors = map[string]int{
	// 0: leaves, pure or self-contained.
	"internal/identity":  0,
	"internal/codec":     0,
	"internal/retention": 0,
	"internal/tracing":   0,
	"internal/failpoint": 0,
	"internal/listener":  0,
	// 1: adapters: Postgres, Stripe, SendGrid, the envelope, Temporal's client.
	"internal/store":          1,
	"internal/payment":        1,
	"internal/email":          1,
	"internal/message":        1,
	"internal/metrics":        1,
	"internal/health":         1,
	"internal/reconcile":      1,
	"internal/outbox":         1,
	"internal/temporalclient": 1,
	// 2: the effect protocol every effect runs on.
	"internal/effect": 2,
	// 3: the effects.
	"activities": 3,
	// 4: deterministic orchestration.
	"workflows": 4,
	// 5: routes and intake: what turns a delivery into a workflow.
	"internal/route":   5,
	"internal/intake":  5,
	"internal/webhook": 5,
	"internal/pruning": 5,
	// 6: wiring.
	"internal/config": 6,
	"worker":          6,
	"starter":         6,
}

// sameFloor lists the allowed imports between packages of one floor.
var sameFloor = map[string][]string{
	"internal/codec":     {"internal/listener"},
	"internal/health":    {"internal/store"},
	"internal/metrics":   {"internal/store"},
	"internal/outbox":    {"internal/store"},
	"internal/reconcile": {"internal/payment", "internal/store"},
	"internal/intake":    {"internal/route"},
	"starter":            {"internal/config"},
	"worker":             {"internal/config"},
}

// denied lists imports of lower floors that are still wrong.
var denied = map[string][]string{
	// Workflows never touch Postgres, HTTP or a Temporal connection.
	"workflows": {"internal/store", "internal/payment", "internal/email", "internal/metrics",
		"internal/health", "internal/reconcile", "internal/outbox", "internal/temporalclient"},
}

// simulators are public and stand alone: they import only each other.
const simPrefix = "sim"

// violations returns every import in imports (package → its imports, both
// relative to the module) that the rules above refuse, and every product
// package with no floor.
func violations(imports map[string][]string) []string {
	var out []string
	for pkg, deps := range imports {
		switch {
		case pkg == simPrefix || strings.HasPrefix(pkg, simPrefix+"/"):
			for _, d := range deps {
				if d != simPrefix && !strings.HasPrefix(d, simPrefix+"/") {
					out = append(out, fmt.Sprintf("%s imports %s: a simulator imports only simulators", pkg, d))
				}
			}
			continue
		case strings.HasPrefix(pkg, "tools/"):
			continue // tooling may use anything; nothing shipped imports it (below)
		}
		floor, ok := floors[pkg]
		if !ok {
			out = append(out, fmt.Sprintf("%s has no floor: place it in tools/layout's floors", pkg))
			continue
		}
		for _, d := range deps {
			if strings.HasPrefix(d, "tools/") || strings.HasPrefix(d, "lab/") {
				out = append(out, fmt.Sprintf("%s imports %s: shipped code never imports the tooling", pkg, d))
				continue
			}
			if d == simPrefix || strings.HasPrefix(d, simPrefix+"/") {
				out = append(out, fmt.Sprintf("%s imports %s: the product never imports a simulator", pkg, d))
				continue
			}
			df, ok := floors[d]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("%s imports %s, which has no floor", pkg, d))
			case contains(denied[pkg], d):
				out = append(out, fmt.Sprintf("%s imports %s: denied", pkg, d))
			case df > floor:
				out = append(out, fmt.Sprintf("%s (floor %d) imports %s (floor %d): a back edge", pkg, floor, d, df))
			case df == floor && !contains(sameFloor[pkg], d):
				out = append(out, fmt.Sprintf("%s imports %s on its own floor %d: not in sameFloor", pkg, d, floor))
			}
		}
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestFloors checks the module's real import graph (go list, non-test
// imports) against the rules.
func TestFloors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	imports := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		pkg := strings.TrimPrefix(fields[0], module)
		if strings.HasPrefix(pkg, "lab/") {
			continue // the lab's own module, when a workspace joins it
		}
		var deps []string
		for _, d := range fields[1:] {
			if strings.HasPrefix(d, module) {
				deps = append(deps, strings.TrimPrefix(d, module))
			}
		}
		imports[pkg] = deps
	}
	if len(imports) < len(floors) {
		t.Fatalf("go list found %d packages, fewer than the %d with a floor", len(imports), len(floors))
	}
	for _, v := range violations(imports) {
		t.Error(v)
	}
}

// TestFloorsRefuseABackEdge: the rules find a back edge, a package without
// a floor, a denied import, an unlisted edge within a floor, and shipped
// code importing tooling or a simulator.
func TestFloorsRefuseABackEdge(t *testing.T) {
	got := violations(map[string][]string{
		"internal/store":    {"activities"},
		"internal/newthing": nil,
		"workflows":         {"internal/store"},
		"internal/payment":  {"internal/email"},
		"activities":        {"tools/storetest", "sim/stripesim"},
		"sim/stripesim":     {"internal/identity"},
		"internal/route":    {"workflows", "internal/message"},
	})
	want := []string{
		"activities imports sim/stripesim: the product never imports a simulator",
		"activities imports tools/storetest: shipped code never imports the tooling",
		"internal/newthing has no floor: place it in tools/layout's floors",
		"internal/payment imports internal/email on its own floor 1: not in sameFloor",
		"internal/store (floor 1) imports activities (floor 3): a back edge",
		"sim/stripesim imports internal/identity: a simulator imports only simulators",
		"workflows imports internal/store: denied",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
