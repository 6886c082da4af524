package e2e

import (
	"os"
	"testing"
)

// TestMain removes the worker binary workerBinary built, if any, once every
// test has run.
func TestMain(m *testing.M) {
	code := m.Run()
	if workerDir != "" {
		_ = os.RemoveAll(workerDir)
	}
	os.Exit(code)
}
