package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/effectively/effectively/internal/intake/httpapi"
)

// apiOrder is the message the printed curl call submits.
const apiOrder = `{"type":"order.placed","data":{"order_id":45,"amount":2500,"currency":"usd","customer_email":"ada@example.com","payment_method":"pm_card_visa"}}`

// apiEnv turns the worker's HTTP intake on: a fresh local token whose hash
// goes to a tokens file in the state directory, bound to both types.
func (s *stack) apiEnv() (env []string, addr, token string, err error) {
	addr, err = freeAddr("127.0.0.1:8083")
	if err != nil {
		return nil, "", "", err
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, "", "", err
	}
	token = "dev_" + hex.EncodeToString(b[:])
	path := filepath.Join(s.state, "api-tokens")
	line := "devstack " + httpapi.HashToken(token) + " order.placed,order.refund_requested\n"
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		return nil, "", "", err
	}
	return []string{"EFFECTIVELY_API_ADDR=" + addr, "EFFECTIVELY_API_TOKENS_FILE=" + path}, addr, token, nil
}

// apiCurl prints the curl call that submits a message and waits for its
// outcome, then makes the same call and prints the answer it got.
func apiCurl(ctx context.Context, out io.Writer, addr, token string) error {
	url := "http://" + addr + "/v1/messages"
	fmt.Fprintf(out, "curl -sS -X POST %s -H 'Authorization: Bearer %s' -H 'Idempotency-Key: evt_http1' -H 'Prefer: wait=10' -d '%s'\n", url, token, apiOrder)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(apiOrder))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", "evt_http1")
	req.Header.Set("Prefer", "wait=10")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("the HTTP intake: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("the HTTP intake answered %d: %s", resp.StatusCode, body)
	}
	fmt.Fprintf(out, "%s", body)
	return nil
}
