package soak

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ServerWindow is what the Temporal server's own metrics (the dev
// server's --metrics-port) and the machine's CPU showed between two
// readings: where a route's latency goes when it is not in a queue of its
// own.
type ServerWindow struct {
	// StartMean and RespondMean are the server's mean latencies (its
	// frontend's) of StartWorkflowExecution and RespondWorkflowTaskCompleted.
	StartMean   time.Duration `json:"start_mean"`
	RespondMean time.Duration `json:"respond_mean"`
	// Starts counts the StartWorkflowExecution requests; AlreadyStarted
	// those refused as already started (a start tried twice: by the fast
	// path and the dispatcher, say).
	Starts         int `json:"starts"`
	AlreadyStarted int `json:"already_started"`
	// TaskTimeouts counts workflow tasks that timed out (started, not
	// answered within their timeout: the worker's answer came too late);
	// HeartbeatTimeouts the activities whose heartbeats came too late.
	TaskTimeouts      int `json:"task_timeouts"`
	HeartbeatTimeouts int `json:"heartbeat_timeouts"`
	// TransferQueueMean is the mean time from a history transfer task's
	// creation to its completion (the server's task_latency_queue), by task
	// type (Activity, WorkflowTask): on the dev server's single history
	// shard, every route's tasks wait in one queue.
	TransferQueueMean map[string]time.Duration `json:"transfer_queue_mean,omitempty"`
	// Requests counts the frontend's requests by operation: what the
	// workers asked of the server.
	Requests map[string]int `json:"requests,omitempty"`
	// CPUBusy is the share of the machine's CPU time busy (/proc/stat), of
	// every process on it; -1 when unknown.
	CPUBusy float64 `json:"cpu_busy"`
}

// String renders w on one line.
func (w ServerWindow) String() string {
	cpu := "unknown"
	if w.CPUBusy >= 0 {
		cpu = fmt.Sprintf("%.0f%%", 100*w.CPUBusy)
	}
	queue := ""
	for _, typ := range []string{"WorkflowTask", "Activity"} {
		if d, ok := w.TransferQueueMean[typ]; ok {
			queue += fmt.Sprintf(", transfer %s queued %s", typ, d.Round(time.Millisecond))
		}
	}
	ops := slices.Collect(maps.Keys(w.Requests))
	slices.SortFunc(ops, func(a, b string) int { return cmp.Or(w.Requests[b]-w.Requests[a], strings.Compare(a, b)) })
	var top []string
	for _, op := range ops[:min(len(ops), 6)] {
		top = append(top, fmt.Sprintf("%s %d", op, w.Requests[op]))
	}
	return fmt.Sprintf("StartWorkflowExecution %s (%d, %d already started), RespondWorkflowTaskCompleted %s%s, workflow task timeouts %d, activity heartbeat timeouts %d, machine CPU busy %s; most asked: %s",
		w.StartMean.Round(time.Millisecond), w.Starts, w.AlreadyStarted, w.RespondMean.Round(time.Millisecond), queue, w.TaskTimeouts, w.HeartbeatTimeouts, cpu, strings.Join(top, ", "))
}

// serverReading is one reading of the server's metrics and the CPU.
type serverReading struct {
	sum, count           map[string]float64 // service_latency by operation
	qsum, qcount         map[string]float64 // task_latency_queue by transfer task type
	taskTimeouts, beats  float64
	alreadyStarted       float64
	cpuBusy, cpuAll      float64
	cpuKnown, metricsSet bool
}

// readServer reads the server's metrics at url ("" reads only the CPU).
func readServer(ctx context.Context, url string) (serverReading, error) {
	r := serverReading{sum: map[string]float64{}, count: map[string]float64{}, qsum: map[string]float64{}, qcount: map[string]float64{}}
	r.cpuBusy, r.cpuAll, r.cpuKnown = readCPU()
	if url == "" {
		return r, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return r, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return r, fmt.Errorf("temporal server metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("temporal server metrics: %s", resp.Status)
	}
	r.metricsSet = true
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, ok := promLine(line)
		if !ok {
			continue
		}
		switch name {
		case "service_latency_sum", "service_latency_count":
			if label(labels, "service_name") != "frontend" { // what the clients wait for
				continue
			}
			if name == "service_latency_sum" {
				r.sum[label(labels, "operation")] += value
			} else {
				r.count[label(labels, "operation")] += value
			}
		case "task_latency_queue_sum", "task_latency_queue_count":
			typ, ok := strings.CutPrefix(label(labels, "operation"), "TransferActiveTask")
			if !ok {
				continue
			}
			if name == "task_latency_queue_sum" {
				r.qsum[typ] += value
			} else {
				r.qcount[typ] += value
			}
		case "start_to_close_timeout":
			if label(labels, "operation") == "TimerActiveTaskWorkflowTaskTimeout" {
				r.taskTimeouts += value
			}
		case "service_error_with_type":
			if label(labels, "operation") == "StartWorkflowExecution" && label(labels, "error_type") == "serviceerror_WorkflowExecutionAlreadyStarted" && label(labels, "service_name") == "frontend" {
				r.alreadyStarted += value
			}
		case "activity_task_timeout":
			if label(labels, "timeout_type") == "Heartbeat" {
				r.beats += value
			}
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return r, sc.Err()
}

// window is what happened from a to b.
func window(a, b serverReading) ServerWindow {
	mean := func(op string) time.Duration {
		n := b.count[op] - a.count[op]
		if n <= 0 {
			return 0
		}
		return time.Duration((b.sum[op] - a.sum[op]) / n * float64(time.Second))
	}
	w := ServerWindow{
		StartMean: mean("StartWorkflowExecution"), RespondMean: mean("RespondWorkflowTaskCompleted"),
		Starts:         int(b.count["StartWorkflowExecution"] - a.count["StartWorkflowExecution"]),
		AlreadyStarted: int(b.alreadyStarted - a.alreadyStarted),
		TaskTimeouts:   int(b.taskTimeouts - a.taskTimeouts), HeartbeatTimeouts: int(b.beats - a.beats),
		CPUBusy: -1,
	}
	for op, c := range b.count {
		if n := int(c - a.count[op]); n > 0 {
			if w.Requests == nil {
				w.Requests = map[string]int{}
			}
			w.Requests[op] = n
		}
	}
	for typ, c := range b.qcount {
		if n := c - a.qcount[typ]; n > 0 {
			if w.TransferQueueMean == nil {
				w.TransferQueueMean = map[string]time.Duration{}
			}
			w.TransferQueueMean[typ] = time.Duration((b.qsum[typ] - a.qsum[typ]) / n * float64(time.Second))
		}
	}
	if a.cpuKnown && b.cpuKnown && b.cpuAll > a.cpuAll {
		w.CPUBusy = (b.cpuBusy - a.cpuBusy) / (b.cpuAll - a.cpuAll)
	}
	return w
}

// promLine splits a Prometheus text line: name, labels, value.
func promLine(line string) (name, labels string, value float64, ok bool) {
	sp := strings.LastIndexByte(line, ' ')
	if sp < 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(line[sp+1:], 64)
	if err != nil {
		return "", "", 0, false
	}
	head := line[:sp]
	if i := strings.IndexByte(head, '{'); i >= 0 {
		return head[:i], head[i:], v, true
	}
	return head, "", v, true
}

// label is the value of key in a Prometheus label set.
func label(labels, key string) string {
	i := strings.Index(labels, key+`="`)
	if i < 0 {
		return ""
	}
	rest := labels[i+len(key)+2:]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}

// readCPU returns the machine's busy and total CPU time from /proc/stat
// (user, nice, system, idle, iowait, irq, softirq, steal).
func readCPU() (busy, all float64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:9] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, 0, false
		}
		all += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, all, true
}
