package simfault_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/effectively/effectively/sim/simfault"
)

// TestWebhookQueueIsBounded: with a receiver that never answers, at most
// QueueSize deliveries wait; the rest are dropped and counted, so a
// simulator's webhook memory stays bounded whatever it emits.
func TestWebhookQueueIsBounded(t *testing.T) {
	block := make(chan struct{})
	rcv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
	defer rcv.Close()
	defer close(block)
	const size, n = 4, 20
	s, err := simfault.StartWebhooks(simfault.WebhookConfig{URL: rcv.URL, QueueSize: size, Concurrency: 1, Client: &http.Client{Timeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	for range n {
		s.Enqueue([]byte(`{}`), func([]byte, time.Time) http.Header { return http.Header{} })
	}
	st := s.Stats()
	if st.Enqueued != size || st.Dropped != n-size || s.Pending() > size {
		t.Errorf("stats %+v, pending %d; want %d enqueued, %d dropped", st, s.Pending(), size, n-size)
	}
}
