package main

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.temporal.io/sdk/converter"

	"github.com/effectively/effectively/internal/adapter/temporalclient"
	"github.com/effectively/effectively/internal/config"
)

// TestCodecServerSharesTheClientsKeyring: the keyring is loaded once, by
// internal/config, and the codec server decrypts what the Temporal client
// encrypts with it.
func TestCodecServerSharesTheClientsKeyring(t *testing.T) {
	const token = "a-token-of-sixteen-chars"
	key := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	env := map[string]string{
		"EFFECTIVELY_CODEC_KEYS":        "k1:" + key,
		"EFFECTIVELY_CODEC_SERVER_ADDR": "127.0.0.1:0",
		"EFFECTIVELY_CODEC_TOKEN":       token,
	}
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	opts := temporalclient.Options(cfg.Temporal, nil)
	if opts.DataConverter == nil {
		t.Fatal("the Temporal client does not encrypt with the configured keys")
	}
	p, err := opts.DataConverter.ToPayload("ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(p.GetData()), "ada@example.com") {
		t.Fatal("the client's payload is in plaintext")
	}

	cs, err := newCodecServer(cfg)
	if err != nil || cs == nil {
		t.Fatalf("codec server: %v", err)
	}
	srv := httptest.NewServer(cs.h)
	defer srv.Close()
	remote := converter.NewRemoteDataConverter(converter.GetDefaultDataConverter(), converter.RemoteDataConverterOptions{
		Endpoint: srv.URL,
		ModifyRequest: func(r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		},
	})
	var got string
	if err := remote.FromPayload(p, &got); err != nil {
		t.Fatalf("decode through the codec server: %v", err)
	}
	if got != "ada@example.com" {
		t.Errorf("decoded %q", got)
	}

	delete(env, "EFFECTIVELY_CODEC_KEYS")
	cfg, err = config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newCodecServer(cfg); err == nil || !strings.Contains(err.Error(), "EFFECTIVELY_CODEC_KEYS") {
		t.Errorf("codec server without keys: err = %v, want one naming EFFECTIVELY_CODEC_KEYS", err)
	}
}

// TestCodecRequireReachesClientAndServer: with EFFECTIVELY_CODEC_REQUIRE on,
// the Temporal client's data converter and the codec server both refuse a
// plaintext payload, and both still read what the client encrypted.
func TestCodecRequireReachesClientAndServer(t *testing.T) {
	const token = "a-token-of-sixteen-chars"
	key := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	env := map[string]string{
		"EFFECTIVELY_CODEC_KEYS":        "k1:" + key,
		"EFFECTIVELY_CODEC_REQUIRE":     "true",
		"EFFECTIVELY_CODEC_SERVER_ADDR": "127.0.0.1:0",
		"EFFECTIVELY_CODEC_TOKEN":       token,
	}
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	dc := temporalclient.Options(cfg.Temporal, nil).DataConverter
	plain, err := converter.GetDefaultDataConverter().ToPayload("ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	enc, err := dc.ToPayload("ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := dc.FromPayload(plain, &got); err == nil || !strings.Contains(err.Error(), "not encrypted") {
		t.Errorf("client decoding plaintext: err = %v, want a refusal", err)
	}
	if err := dc.FromPayload(enc, &got); err != nil || got != "ada@example.com" {
		t.Errorf("client decoding its own payload = %q, %v", got, err)
	}

	cs, err := newCodecServer(cfg)
	if err != nil || cs == nil {
		t.Fatalf("codec server: %v", err)
	}
	srv := httptest.NewServer(cs.h)
	defer srv.Close()
	remote := converter.NewRemoteDataConverter(converter.GetDefaultDataConverter(), converter.RemoteDataConverterOptions{
		Endpoint: srv.URL,
		ModifyRequest: func(r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		},
	})
	got = ""
	if err := remote.FromPayload(plain, &got); err == nil || !strings.Contains(err.Error(), "not encrypted") {
		t.Errorf("codec server decoding plaintext: %q, err = %v; want a refusal", got, err)
	}
	if err := remote.FromPayload(enc, &got); err != nil || got != "ada@example.com" {
		t.Errorf("codec server decoding the client's payload = %q, %v", got, err)
	}
}

// TestRequireWithoutKeysExits2: the worker refuses to start, as with any bad
// configuration, when encryption is required and no key is set.
func TestRequireWithoutKeysExits2(t *testing.T) {
	t.Setenv("EFFECTIVELY_CODEC_REQUIRE", "true")
	t.Setenv("EFFECTIVELY_CODEC_KEYS", "")
	t.Setenv("EFFECTIVELY_CODEC_KEY_FILE", "")
	t.Setenv("STRIPE_API_KEY", "sk_test_x")
	t.Setenv("SENDGRID_API_KEY", "SG.x")
	// Were the configuration accepted, the worker would fail fast here (exit 1).
	t.Setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	t.Setenv("NATS_URL", "off")
	t.Setenv("EFFECTIVELY_HEALTH_ADDR", "off")
	t.Setenv("EFFECTIVELY_WEBHOOK_ADDR", "off")
	if code := run(nil); code != 2 {
		t.Errorf("worker exit %d, want 2", code)
	}
}
