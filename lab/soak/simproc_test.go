package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/testenv"
)

// simProcess is sim/providersim run as a process of its own, as the
// providers are apart from the workers in production: its CPU is not the
// test process's, where the probes and the publisher run.
type simProcess struct {
	StripeURL, SendGridURL string
}

// startSimProcess builds and starts sim/providersim on loopback ports of
// its own, with Stripe's global limit at 4× endpoint and endpoint for each
// Stripe endpoint and SendGrid's key; it is stopped (SIGTERM) when t ends.
func startSimProcess(t *testing.T, endpoint float64) *simProcess {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "providersim")
	build := exec.Command("go", "build", "-o", bin, "./sim/providersim")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./sim/providersim: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-stripe-addr", "127.0.0.1:0", "-sendgrid-addr", "127.0.0.1:0",
		"-stripe-rate", fmt.Sprint(4*endpoint), "-stripe-endpoint-rate", fmt.Sprint(endpoint), "-sendgrid-rate", fmt.Sprint(endpoint))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start providersim: %v", err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	addrs := make(chan [2]string, 2)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var l struct{ Msg, Sim, Addr string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "simulator listening" {
				addrs <- [2]string{l.Sim, l.Addr}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
	}()
	p := &simProcess{}
	timeout := time.After(30 * time.Second)
	for p.StripeURL == "" || p.SendGridURL == "" {
		select {
		case a := <-addrs:
			switch a[0] {
			case "stripe":
				p.StripeURL = "http://" + a[1]
			case "sendgrid":
				p.SendGridURL = "http://" + a[1]
			}
		case <-done:
			t.Fatal("providersim exited before it listened")
		case <-timeout:
			t.Fatal("providersim did not listen within 30s")
		}
	}
	return p
}

// Stats reads both simulators' counts through their control API.
func (p *simProcess) Stats(ctx context.Context) (stripesim.Stats, sendgridsim.Stats, error) {
	var s stripesim.Stats
	var g sendgridsim.Stats
	if err := getJSON(ctx, p.StripeURL+"/_sim/stats", &s); err != nil {
		return s, g, err
	}
	err := getJSON(ctx, p.SendGridURL+"/_sim/stats", &g)
	return s, g, err
}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// TestSimProcess: the simulators run apart answer the worker's API at the
// limit given, 429 past it, and their counts come back through the
// control API.
func TestSimProcess(t *testing.T) {
	p := startSimProcess(t, 1)
	ctx := context.Background()
	var codes []int
	for range 2 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.StripeURL+"/v1/payment_intents",
			strings.NewReader("amount=100&currency=usd"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer sk_test_simprocess")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if codes[0] != http.StatusOK || codes[1] != http.StatusTooManyRequests {
		t.Errorf("answers %v; want 200 then 429 at 1 request a second", codes)
	}
	s, g, err := p.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 2 || s.RateLimited != 1 || g.Requests != 0 {
		t.Errorf("Stripe requests %d, 429s %d, SendGrid requests %d; want 2, 1, 0", s.Requests, s.RateLimited, g.Requests)
	}
}
