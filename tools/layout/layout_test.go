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

// floors maps a folder to its floor: a package's floor is that of the
// longest folder its path starts with, so the folder tells the floor. A
// package may import the packages of lower floors; the edges within a floor
// are listed in sameFloor, and those that skip down but are still wrong in
// denied. A package in no folder here fails the test.
var floors = map[string]int{
	// 0: leaves, pure or self-contained: they import nothing of ours.
	"internal/leaf": 0,
	// 1: adapters: Postgres, Stripe, SendGrid, the envelope, Temporal's client.
	"internal/adapter": 1,
	// 2: the effect protocol every effect runs on.
	"internal/effect": 2,
	// 3: the effects.
	"activities": 3,
	// 4: deterministic orchestration.
	"workflows": 4,
	// 5: intake and routes: what turns a delivery into a workflow, and how
	// long its record is kept.
	"internal/intake": 5,
	// 6: wiring.
	"internal/config": 6,
	"worker":          6,
	"starter":         6,
}

// floorOf returns pkg's floor and the folder that gives it.
func floorOf(pkg string) (floor int, folder string, ok bool) {
	for f, n := range floors {
		if (pkg == f || strings.HasPrefix(pkg, f+"/")) && len(f) > len(folder) {
			floor, folder, ok = n, f, true
		}
	}
	return floor, folder, ok
}

// sameFloor lists the allowed imports between packages of one floor.
var sameFloor = map[string][]string{
	"internal/leaf/codec":        {"internal/leaf/listener"},
	"internal/adapter/health":    {"internal/adapter/store"},
	"internal/adapter/metrics":   {"internal/adapter/store"},
	"internal/adapter/outbox":    {"internal/adapter/store"},
	"internal/adapter/audit":     {"internal/adapter/payment", "internal/adapter/store"},
	"internal/adapter/ratelimit": {"internal/adapter/store"},
	"internal/adapter/reconcile": {"internal/adapter/payment", "internal/adapter/store"},
	"internal/intake":            {"internal/intake/route", "internal/intake/retention"},
	"internal/intake/webhook":    {"internal/intake/route"},
	"internal/intake/jetstream":  {"internal/intake", "internal/intake/retention"},
	"internal/intake/httpapi":    {"internal/intake"},
	"internal/intake/rabbitmq":   {"internal/intake", "internal/intake/retention"},
	"internal/intake/kafka":      {"internal/intake", "internal/intake/retention"},
	"starter":                    {"internal/config"},
	"worker":                     {"internal/config"},
}

// denied lists imports of lower floors that are still wrong.
var denied = map[string][]string{
	// Workflows never touch Postgres, HTTP or a Temporal connection.
	"workflows": {"internal/adapter/store", "internal/adapter/payment", "internal/adapter/email", "internal/adapter/metrics",
		"internal/adapter/health", "internal/adapter/reconcile", "internal/adapter/outbox", "internal/adapter/temporalclient"},
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
		floor, _, ok := floorOf(pkg)
		if !ok {
			out = append(out, fmt.Sprintf("%s is in no floor's folder: move it into one, or add its folder to tools/layout's floors", pkg))
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
			df, _, ok := floorOf(d)
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
	if len(imports) < 20 {
		t.Fatalf("go list found %d packages: the module has more", len(imports))
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
		"internal/adapter/store":   {"activities"},
		"internal/newthing":        nil,
		"workflows":                {"internal/adapter/store"},
		"internal/adapter/payment": {"internal/adapter/email"},
		"activities":               {"tools/storetest", "sim/stripesim"},
		"sim/stripesim":            {"internal/leaf/identity"},
		"internal/intake/route":    {"workflows", "internal/adapter/message"},
		"internal/leaf/tracing":    {"internal/adapter/store"},
	})
	want := []string{
		"activities imports sim/stripesim: the product never imports a simulator",
		"activities imports tools/storetest: shipped code never imports the tooling",
		"internal/adapter/payment imports internal/adapter/email on its own floor 1: not in sameFloor",
		"internal/adapter/store (floor 1) imports activities (floor 3): a back edge",
		"internal/leaf/tracing (floor 0) imports internal/adapter/store (floor 1): a back edge",
		"internal/newthing is in no floor's folder: move it into one, or add its folder to tools/layout's floors",
		"sim/stripesim imports internal/leaf/identity: a simulator imports only simulators",
		"workflows imports internal/adapter/store: denied",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
