package simfault

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// maxControlBody bounds control API request bodies.
const maxControlBody = 1 << 20

// Control is what the control API needs from a simulator. The functions are
// called from HTTP handlers, so each must be safe for concurrent use; all
// must be set.
type Control[M any] struct {
	// Stats returns the simulator's counters, answered as JSON.
	Stats func() any
	// Faults returns the armed faults.
	Faults func() []Armed[M]
	// AddFault arms a fault, which the control API has validated.
	AddFault func(Fault[M])
	// ClearFaults removes every fault.
	ClearFaults func()
	// Reset forgets what the simulator has seen, as the simulator defines it.
	Reset func()
	// Latency returns the latency added to every provider API request.
	Latency func() time.Duration
	// SetLatency sets that latency.
	SetLatency func(time.Duration)
}

// Register adds the control API's routes to mux:
//
//	GET    /_sim/stats    Stats, as JSON
//	GET    /_sim/faults   the armed faults: {"faults":[{…,"times":2,"remaining":1}]}
//	POST   /_sim/faults   arm a Fault given as JSON; answers it, 201
//	DELETE /_sim/faults   remove every fault: {"ok":true}
//	POST   /_sim/reset    Reset: {"ok":true}
//	GET    /_sim/latency  the latency: {"latency_ms":5}
//	POST   /_sim/latency  set it: {"latency_ms":5}
//
// Answers are JSON followed by a newline. A request that cannot be obeyed
// (bad JSON, an unknown member, an invalid fault, a missing or negative
// latency) is answered 400 with {"error":"…"}.
func (c Control[M]) Register(mux *http.ServeMux) {
	ok := map[string]bool{"ok": true}
	mux.HandleFunc("GET /_sim/stats", func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusOK, c.Stats())
	})
	mux.HandleFunc("GET /_sim/faults", func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]any{"faults": c.Faults()})
	})
	mux.HandleFunc("POST /_sim/faults", c.addFault)
	mux.HandleFunc("DELETE /_sim/faults", func(w http.ResponseWriter, _ *http.Request) {
		c.ClearFaults()
		WriteJSON(w, http.StatusOK, ok)
	})
	mux.HandleFunc("POST /_sim/reset", func(w http.ResponseWriter, _ *http.Request) {
		c.Reset()
		WriteJSON(w, http.StatusOK, ok)
	})
	mux.HandleFunc("GET /_sim/latency", func(w http.ResponseWriter, _ *http.Request) {
		ms := c.Latency().Milliseconds()
		WriteJSON(w, http.StatusOK, latencyJSON{LatencyMS: &ms})
	})
	mux.HandleFunc("POST /_sim/latency", c.setLatency)
}

type latencyJSON struct {
	LatencyMS *int64 `json:"latency_ms"`
}

func (c Control[M]) addFault(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxControlBody))
	if err != nil {
		writeError(w, fmt.Errorf("read body: %w", err))
		return
	}
	var f Fault[M]
	err = json.Unmarshal(body, &f) // Fault rejects unknown members itself
	if err == nil {
		err = f.Validate()
	}
	if err != nil {
		writeError(w, err)
		return
	}
	c.AddFault(f)
	WriteJSON(w, http.StatusCreated, f)
}

func (c Control[M]) setLatency(w http.ResponseWriter, r *http.Request) {
	var in latencyJSON
	if err := decodeStrict(w, r, &in); err != nil {
		writeError(w, err)
		return
	}
	if in.LatencyMS == nil || *in.LatencyMS < 0 {
		writeError(w, errors.New("latency_ms is required and must not be negative"))
		return
	}
	c.SetLatency(time.Duration(*in.LatencyMS) * time.Millisecond)
	WriteJSON(w, http.StatusOK, in)
}

// decodeStrict decodes a single JSON value from r's body into v, rejecting
// unknown members so that a misspelt one fails loudly.
func decodeStrict(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	if dec.More() {
		return errors.New("invalid JSON body: more than one value")
	}
	return nil
}

func writeError(w http.ResponseWriter, err error) {
	WriteJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
}

// WriteJSON answers status with v encoded as JSON and a newline, the form
// of every control API answer. If v cannot be encoded it answers 500.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"cannot encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n')) // the client may be gone; nothing to do about it
}
