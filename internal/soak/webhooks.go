package soak

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"time"

	"github.com/effectively/effectively/internal/sim/sendgridsim"
	"github.com/effectively/effectively/internal/sim/simfault"
	"github.com/effectively/effectively/internal/sim/stripesim"
	"github.com/effectively/effectively/internal/webhook"
)

// WebhookReport is what the simulators' webhook senders did during a run.
type WebhookReport struct {
	Stripe   simfault.WebhookStats `json:"stripe"`
	SendGrid simfault.WebhookStats `json:"sendgrid"`
}

// webhookDelivery is how the simulators deliver their events in a soak:
// every event twice, reordered by up to 300 ms, retried while the worker
// serving the listener is down.
var webhookDelivery = simfault.WebhookConfig{Copies: 2, MaxDelay: 300 * time.Millisecond, RetryInitial: 100 * time.Millisecond, RetryMax: 2 * time.Second}

// soakResendGrace is EMAIL_RESEND_GRACE in a soak: shorter than the
// EMAIL_START_TO_CLOSE (5s) the soak's workers run with.
const soakResendGrace = "3s"

// hooks is the webhook side of a soak: the simulators deliver to one
// worker's listener; every worker waits the resend grace.
type hooks struct {
	listenerEnv []string // for the one worker that serves the webhooks
	allEnv      []string // for every worker
	stop        func()
}

// startWebhooks makes the simulators deliver signed events to a listener
// address that one worker process will serve, with a fresh Stripe secret
// and SendGrid key.
func startWebhooks(st Stack) (*hooks, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	secret := "whsec_soak_" + hex.EncodeToString(b[:])
	key, pub, err := sendgridsim.GenerateWebhookKey()
	if err != nil {
		return nil, err
	}
	stripeCfg, sgCfg := webhookDelivery, webhookDelivery
	stripeCfg.URL = "http://" + addr + webhook.StripePath
	sgCfg.URL = "http://" + addr + webhook.SendGridPath
	if err := st.Stripe.StartWebhooks(stripesim.WebhookOptions{WebhookConfig: stripeCfg, Secret: secret}); err != nil {
		return nil, err
	}
	if err := st.SendGrid.StartWebhooks(sendgridsim.WebhookOptions{WebhookConfig: sgCfg, Key: key}); err != nil {
		st.Stripe.StopWebhooks()
		return nil, err
	}
	return &hooks{
		listenerEnv: []string{"EFFECTIVELY_WEBHOOK_ADDR=" + addr, "STRIPE_WEBHOOK_SECRETS=" + secret, "SENDGRID_WEBHOOK_PUBLIC_KEY=" + pub},
		allEnv:      []string{"EMAIL_RESEND_GRACE=" + soakResendGrace},
		stop:        func() { st.Stripe.StopWebhooks(); st.SendGrid.StopWebhooks() },
	}, nil
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
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
