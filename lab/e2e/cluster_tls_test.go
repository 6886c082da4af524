package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/tools/cluster"
	"github.com/effectively/effectively/tools/natstest"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/tools/workerproc"
)

// TestSetupOverMutualTLS: against a Temporal server whose frontend requires
// mutual TLS, as Temporal Cloud's does, `worker setup` with the envconfig
// variables TEMPORAL_TLS_CLIENT_CERT_PATH, …_KEY_PATH and
// …_SERVER_CA_CERT_PATH prepares a fresh namespace (exit 0, the search
// attributes registered), and a second run changes nothing. Without the
// client certificate the handshake is refused and setup fails (exit 1)
// naming the dial.
func TestSetupOverMutualTLS(t *testing.T) {
	ctx := context.Background()
	pki := natstest.NewPKI(t)
	c, err := cluster.Start(ctx, cluster.Options{
		Bin: filepath.Join(testenv.RepoRoot(), "bin"), Dir: t.TempDir(), Fresh: true,
		Database: "temporal_tls_test", Namespace: "tls-test",
		TLS: &cluster.TLS{CA: pki.CA, ServerCert: pki.ServerCert, ServerKey: pki.ServerKey, ClientCert: pki.ClientCert, ClientKey: pki.ClientKey},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	bin, err := workerproc.Build(ctx, testenv.RepoRoot(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base := workerproc.Env(workerproc.Config{
		DatabaseURL: storetest.NewDatabase(t), TemporalAddress: c.Address(), TaskQueue: "tls",
		StripeURL: "http://127.0.0.1:1", SendGridURL: "http://127.0.0.1:1",
	})
	base = append(base, "TEMPORAL_NAMESPACE=tls-test", "TEMPORAL_TLS_SERVER_CA_CERT_PATH="+pki.CA, "TEMPORAL_TLS_SERVER_NAME=localhost")
	setup := func(extra ...string) (int, string) {
		cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, bin, "setup")
		cmd.Env = append(append([]string{}, base...), extra...)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	withCert := []string{"TEMPORAL_TLS_CLIENT_CERT_PATH=" + pki.ClientCert, "TEMPORAL_TLS_CLIENT_KEY_PATH=" + pki.ClientKey}
	for run := 1; run <= 2; run++ {
		if code, out := setup(withCert...); code != 0 || !strings.Contains(out, "namespace is ready") {
			t.Fatalf("setup over mTLS, run %d: exit %d\n%s", run, code, out)
		}
	}
	if code, out := setup(); code != 1 {
		t.Fatalf("setup without a client certificate: exit %d, want 1\n%s", code, out)
	} else {
		t.Logf("without a client certificate: %s", lastLine(out))
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
