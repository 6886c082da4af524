package soak

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/effectively/effectively/internal/intake/webhook"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/simfault"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/workerproc"
)

// WebhookReport is what the simulators' webhook senders did during a run.
type WebhookReport struct {
	Stripe   simfault.WebhookStats `json:"stripe"`
	SendGrid simfault.WebhookStats `json:"sendgrid"`
}

// webhookDelivery is how the simulators deliver their events in a soak:
// every event twice, reordered by up to 300 ms, retried when no worker
// answers.
var webhookDelivery = simfault.WebhookConfig{Copies: 2, MaxDelay: 300 * time.Millisecond, RetryInitial: 100 * time.Millisecond, RetryMax: 2 * time.Second}

// soakResendGrace is EMAIL_RESEND_GRACE in a soak, and soakEmailStart the
// EMAIL_START_TO_CLOSE its workers then run with: the attempt that waits
// the grace keeps the 2 s in which no mail is sent, and 2 s to send it.
const soakResendGrace, soakEmailStart = "3s", "7s"

// soakEventBatch is how long SendGrid's simulator gathers events into one
// webhook POST in a soak.
const soakEventBatch = 250 * time.Millisecond

// hooks is the webhook side of a soak: the simulators deliver to a load
// balancer in front of every worker's listener, as a provider delivers to
// a deployment; every worker waits the resend grace.
type hooks struct {
	env  []string // for every worker, but its listen address
	lb   *balancer
	stop func()
}

// startWebhooks starts the load balancer and makes the simulators deliver
// signed events to it, with a fresh Stripe secret and SendGrid key.
func startWebhooks(st Stack) (*hooks, error) {
	lb, err := startBalancer()
	if err != nil {
		return nil, err
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	secret := "whsec_soak_" + hex.EncodeToString(b[:])
	key, pub, err := sendgridsim.GenerateWebhookKey()
	if err != nil {
		lb.close()
		return nil, err
	}
	stripeCfg, sgCfg := webhookDelivery, webhookDelivery
	stripeCfg.URL = lb.url + webhook.StripePath
	sgCfg.URL = lb.url + webhook.SendGridPath
	if err := st.Stripe.StartWebhooks(stripesim.WebhookOptions{WebhookConfig: stripeCfg, Secret: secret}); err != nil {
		lb.close()
		return nil, err
	}
	// SendGrid posts its events in batches, several mails' in one signed
	// array: a window well inside the resend grace.
	if err := st.SendGrid.StartWebhooks(sendgridsim.WebhookOptions{WebhookConfig: sgCfg, Key: key, BatchWindow: soakEventBatch}); err != nil {
		st.Stripe.StopWebhooks()
		lb.close()
		return nil, err
	}
	return &hooks{
		env: []string{"STRIPE_WEBHOOK_SECRETS=" + secret, "SENDGRID_WEBHOOK_PUBLIC_KEY=" + pub, "EMAIL_RESEND_GRACE=" + soakResendGrace, "EMAIL_START_TO_CLOSE=" + soakEmailStart},
		lb:  lb,
		stop: func() {
			st.Stripe.StopWebhooks()
			st.SendGrid.StopWebhooks()
			lb.close()
		},
	}, nil
}

// balancer forwards each webhook request to one of the workers' listeners,
// trying the next when one does not answer (a killed or starting worker).
type balancer struct {
	url    string
	srv    *http.Server
	client *http.Client
	mu     sync.Mutex
	addrs  map[*workerproc.Proc]string
	next   int
}

func startBalancer() (*balancer, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook load balancer: %w", err)
	}
	b := &balancer{url: "http://" + ln.Addr().String(), client: &http.Client{Timeout: 10 * time.Second}, addrs: map[*workerproc.Proc]string{}}
	b.srv = &http.Server{Handler: b, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = b.srv.Serve(ln) }()
	return b, nil
}

func (b *balancer) add(p *workerproc.Proc, addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.addrs[p] = addr
}

func (b *balancer) remove(p *workerproc.Proc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.addrs, p)
}

func (b *balancer) close() { _ = b.srv.Close() }

func (b *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	addrs := make([]string, 0, len(b.addrs))
	for _, a := range b.addrs {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	b.next++
	start := b.next
	b.mu.Unlock()
	for i := range addrs {
		// The addresses are the soak's own worker processes on loopback.
		req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+addrs[(start+i)%len(addrs)]+r.URL.Path, bytes.NewReader(body)) //nolint:gosec // G704: loopback workers the soak started
		if err != nil {
			continue
		}
		req.Header = r.Header.Clone()
		resp, err := b.client.Do(req) //nolint:gosec // G704: loopback workers the soak started
		if err != nil {
			continue // not listening (yet, or any more): the next one
		}
		respBody, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(respBody)
		return
	}
	http.Error(w, "no worker listening", http.StatusBadGateway)
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr() (string, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a port for the webhook listener: %w", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr, nil
}

// receiptDone reports whether a receipt status says the receipt went out:
// sent by the API's answer, or reported by SendGrid's events.
func receiptDone(status string) bool {
	return status == "sent" || status == "delivered"
}

// webhookLine is the report's line about webhooks.
func (r Report) webhookLine() string {
	if r.Webhooks == nil {
		return "webhooks: off\n"
	}
	w := r.Webhooks
	return fmt.Sprintf("webhooks: on (stripe %d delivered, %d retries, %d dropped; sendgrid %d delivered, %d retries, %d dropped)\n",
		w.Stripe.Delivered, w.Stripe.Retries, w.Stripe.Dropped, w.SendGrid.Delivered, w.SendGrid.Retries, w.SendGrid.Dropped)
}
