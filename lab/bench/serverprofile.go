package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// serverProfileSeconds bounds the dev server's profiles: a floor of
// make bench-short lasts about five seconds.
const serverProfileSeconds = 6

// ServerComponent is a part of the dev server's work, found in a profile by
// the function that does it.
type ServerComponent struct {
	Name, Symbol string
}

// ServerComponents are the parts of the dev server's work the report
// splits its profiles into, each the share of samples under its function
// (children included, so the parts overlap where one calls another).
var ServerComponents = []ServerComponent{
	{"visibility tasks", "service/history.(*visibilityQueueTaskExecutor).Execute"},
	{"visibility: the start's record", "service/history.(*visibilityQueueTaskExecutor).processStartExecution"},
	{"visibility: the close's record", "service/history.(*visibilityQueueTaskExecutor).processCloseExecution"},
	{"transfer tasks", "service/history.(*transferQueueActiveTaskExecutor).Execute"},
	{"gRPC requests", "google.golang.org/grpc.(*Server).handleStream"},
	{"workflow state: create", "persistence.(*executionManagerImpl).CreateWorkflowExecution"},
	{"workflow state: update", "persistence.(*executionManagerImpl).UpdateWorkflowExecution"},
	{"workflow state: read", "persistence.(*executionManagerImpl).GetWorkflowExecution"},
	{"SQLite statements", "modernc.org/sqlite.(*conn).step"},
	{"garbage collection", "runtime.gcBgMarkWorker"},
}

// ServerProfile is where the dev server's CPU went during the first e2e
// round and the floor after it: the share of its samples under each of
// ServerComponents, from `perf record -e cpu-clock` (a clock, so it works
// on a VM whose PMU perf cannot read).
type ServerProfile struct {
	What  string             `json:"what"`
	E2E   map[string]float64 `json:"e2e"`
	Floor map[string]float64 `json:"floor"`
}

// profileServer samples the dev server's stacks for seconds in the
// background, then reads the shares; the channel yields them, or why there
// are none.
func (s *stack) profileServer(ctx context.Context, seconds int) <-chan serverShares {
	out := make(chan serverShares, 1)
	perf, err := exec.LookPath("perf")
	switch {
	case seconds <= 0:
		err = errors.New("not taken (-profile 0)")
	case s.devServerPID <= 0:
		err = errors.New("no dev server started here")
	case err != nil:
		err = fmt.Errorf("perf is not installed (make test-deps installs linux-perf): %w", err)
	}
	if err != nil {
		out <- serverShares{err: err}
		return out
	}
	go func() {
		f, err := os.CreateTemp("", "effectively-bench-server-*.perf")
		if err != nil {
			out <- serverShares{err: err}
			return
		}
		path := f.Name()
		_ = f.Close()
		defer os.Remove(path)
		pctx, cancel := context.WithTimeout(ctx, time.Duration(seconds+60)*time.Second)
		defer cancel()
		rec := exec.CommandContext(pctx, perf, "record", "-e", "cpu-clock", "-F", "999", "-g", "-q", //nolint:gosec // perf from PATH, a PID and a temp file of this run
			"-p", strconv.Itoa(s.devServerPID), "-o", path, "--", "sleep", strconv.Itoa(seconds))
		if b, err := rec.CombinedOutput(); err != nil {
			out <- serverShares{err: fmt.Errorf("perf record: %w: %s", err, strings.TrimSpace(string(b)))}
			return
		}
		rep := exec.CommandContext(pctx, perf, "report", "-i", path, "--children", "--sort", "symbol", "--stdio", "-g", "none")
		b, err := rep.Output()
		if err != nil {
			out <- serverShares{err: fmt.Errorf("perf report: %w", err)}
			return
		}
		out <- serverShares{shares: componentShares(string(b))}
	}()
	return out
}

type serverShares struct {
	shares map[string]float64
	err    error
}

// perfLine is a line of `perf report --children --sort symbol --stdio -g
// none`: the share with children, the share alone, the symbol (which perf
// may follow with columns of "-").
var perfLine = regexp.MustCompile(`^\s*([0-9.]+)%\s+[0-9.]+%\s+\[[^\]]\]\s+(\S+)`)

// componentShares reads the share (in percent, children included) of each
// of ServerComponents from a perf report; a component whose function never
// showed has 0.
func componentShares(report string) map[string]float64 {
	bySymbol := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(report))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		m := perfLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if v, err := strconv.ParseFloat(m[1], 64); err == nil {
			bySymbol[m[2]] = max(bySymbol[m[2]], v)
		}
	}
	out := make(map[string]float64, len(ServerComponents))
	for _, c := range ServerComponents {
		for sym, v := range bySymbol {
			if strings.HasSuffix(sym, c.Symbol) {
				out[c.Name] = max(out[c.Name], v)
			}
		}
		if _, ok := out[c.Name]; !ok {
			out[c.Name] = 0
		}
	}
	return out
}
