package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/chromedp"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// EnvUpdateScreenshots names the variable that makes TestTemporalUI write
// its screenshots into docs/img (UPDATE_SCREENSHOTS=1); otherwise they go to
// a temporary folder.
const EnvUpdateScreenshots = "UPDATE_SCREENSHOTS"

// chromium returns the path of Debian's chromium. It is never skipped:
// .ci/run installs the package.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("a headless Chromium is required: apt-get install chromium (Debian's package; .ci/run installs it)")
	return ""
}

// TestTemporalUI runs a message through the real stack and looks at it the
// way an operator does, in the dev server's Temporal UI in a headless
// Chromium: searching MessageId="…" lists its workflow, and the workflow's
// page shows the summary and details naming both idempotency keys and the
// summaries of the charge and the receipt. Payloads are not encrypted here
// (no codec keys): with keys, the UI shows summaries only through the codec
// server (docs/operations.md).
func TestTemporalUI(t *testing.T) {
	browser := chromium(t)
	uiPort := freePort(t)
	s := testenv.NewStack(t, testenv.StackOptions{UIPort: uiPort})

	const (
		msgID   = "evt_ui_demo1"
		orderID = 4711
	)
	res := accept(t, s, order(msgID, orderID, "pm_card_visa"))
	if st := wait(t, s, msgID); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("outcome = %+v (accept %+v)", st, res)
	}
	wfID, err := identity.WorkflowID(message.ConsumerOrderPlaced, msgID)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := s.Client.DescribeWorkflow(context.Background(), wfID, "")
	if err != nil {
		t.Fatal(err)
	}
	runID := desc.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	payKey := identity.MustKey(identity.EffectPayment, msgID)
	mailKey := identity.MustKey(identity.EffectEmail, msgID)
	// Visibility is eventually consistent: the search must find it.
	if n := workflowsFor(t, s.Client, msgID); n != 1 {
		t.Fatalf("visibility lists %d workflows for %s, want 1", n, msgID)
	}

	shots := t.TempDir()
	if os.Getenv(EnvUpdateScreenshots) != "" {
		shots = filepath.Join(testenv.RepoRoot(), "docs", "img")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.NoSandbox, // the tests run as root
		chromedp.WindowSize(1440, 1500),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	// The first run starts the browser, without a timeout: one would stop it.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()

	base := "http://127.0.0.1:" + uiPort + "/namespaces/default"

	// 1. The search an operator types: MessageId="…".
	query := fmt.Sprintf("MessageId=%q", msgID)
	search := base + "/workflows?query=" + url.QueryEscape(query)
	listText := pageText(ctx, t, search, "the search "+query+" to list "+wfID, func(text string) bool {
		return strings.Contains(text, wfID) && strings.Contains(text, workflows.OrderPlacedName)
	})
	if strings.Count(listText, wfID) != 1 {
		t.Errorf("the search %s lists %s %d times, want once:\n%s", query, wfID, strings.Count(listText, wfID), listText)
	}
	screenshot(ctx, t, filepath.Join(shots, "temporal-ui-search.png"))

	// 2. The workflow's page: its history shows the workflow's summary (on
	// the start event) and the charge's and the receipt's summaries, each
	// naming its idempotency key.
	summary := fmt.Sprintf("Order %d from message %s", orderID, msgID)
	chargeSummary := fmt.Sprintf("charge order %d (%s)", orderID, payKey)
	receiptSummary := fmt.Sprintf("send receipt of order %d (%s)", orderID, mailKey)
	wfPage := base + "/workflows/" + url.PathEscape(wfID) + "/" + runID + "/history"
	pageText(ctx, t, wfPage, "the workflow page to show its summary and both activities' summaries",
		containsAll(summary, chargeSummary, receiptSummary))
	screenshot(ctx, t, filepath.Join(shots, "temporal-ui-workflow.png"))

	// 3. Its User Metadata tab: the summary, and the details naming both
	// keys and what each is for.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
		const tab = [...document.querySelectorAll('a, button, [role=tab]')].find(e => e.innerText.trim() === 'User Metadata');
		if (tab) { tab.click(); }
		return !!tab;
	})()`)); err != nil {
		t.Fatalf("open the User Metadata tab: %v", err)
	}
	details := []string{
		summary,
		fmt.Sprintf("charge order %d under key", orderID), payKey,
		"send its receipt under ledger key", mailKey,
	}
	waitText(ctx, t, "the User Metadata tab to show the summary and the details naming both keys", containsAll(details...))
	screenshot(ctx, t, filepath.Join(shots, "temporal-ui-metadata.png"))
}

// frameText is the text inside the page's iframes: the UI renders
// summaries and details (markdown) in sandboxed iframes, which the page's
// innerText does not include.
func frameText(ctx context.Context, t *chromedp.Target) (string, error) {
	depth, pierce := int64(-1), true
	res, err := cdp.Call(ctx, t, dom.GetDocument, dom.GetDocumentParams{Depth: &depth, Pierce: &pierce})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	var walk func(n *cdp.Node, inFrame bool)
	walk = func(n *cdp.Node, inFrame bool) {
		if n == nil || n.NodeName == "SCRIPT" || n.NodeName == "STYLE" {
			return
		}
		if inFrame && n.NodeType == 3 {
			b.WriteString(n.NodeValue)
			b.WriteString(" ")
		}
		for _, c := range n.Children {
			walk(c, inFrame)
		}
		walk(n.ContentDocument, true)
	}
	walk(res.Root, false)
	return b.String(), nil
}

// containsAll accepts a text holding every one of want.
func containsAll(want ...string) func(string) bool {
	return func(text string) bool {
		for _, w := range want {
			if !strings.Contains(text, w) {
				return false
			}
		}
		return true
	}
}

// pageText opens u and waits for its visible text to satisfy ok.
func pageText(ctx context.Context, t *testing.T, u, what string, ok func(string) bool) string {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(u)); err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
	return waitText(ctx, t, what+" at "+u, ok)
}

// waitText polls the current page's visible text until ok accepts it,
// failing the test with what after 45 seconds. It returns the text.
func waitText(ctx context.Context, t *testing.T, what string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		if err == nil {
			var frames string
			frames, err = chromedp.Run(ctx, frameText)
			text += "\n" + frames
		}
		if err == nil && ok(text) {
			// Let the page finish rendering what it is still fetching.
			_ = chromedp.Do(ctx, chromedp.Sleep(time.Second))
			return text
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (err %v); the page shows:\n%s", what, err, text)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// screenshot saves the whole page as a PNG.
func screenshot(ctx context.Context, t *testing.T, path string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", path, len(png))
}

// freePort returns a port nothing listens on right now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return port
}
