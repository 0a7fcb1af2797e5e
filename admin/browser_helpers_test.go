package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The harness of browser_test.go: Chromium driven by chromedp, axe-core injected
// into every page, and the screenshots. The test fails, never skips, when the
// browser or axe-core is missing: scripts/test installs both.

// Environment of the browser test.
const (
	chromiumEnv        = "IDKEEPER_CHROMIUM"           // the browser to run; default /usr/bin/chromium, then $PATH
	axeEnv             = "IDKEEPER_AXE_JS"             // path of axe.min.js (npm axe-core); required
	screenshotsEnv     = "IDKEEPER_SCREENSHOTS"        // where the screenshots go; default a temporary directory
	updateScreenshots  = "IDKEEPER_UPDATE_SCREENSHOTS" // "1": write them to docs/screenshots too
	docsScreenshots    = "../docs/screenshots"         // from the package directory
	stepTimeout        = 15 * time.Second              // bounds every browser step
	desktopW, desktopH = 1280, 800
	phoneW, phoneH     = 390, 844
)

// chromiumPath returns the browser to drive, or fails the test saying how to get
// one.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(chromiumEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v", chromiumEnv, p, err)
		}
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("no Chromium for the browser tests: install it (scripts/test does: apt-get install chromium) " +
		"or set " + chromiumEnv + " to a Chromium or Chrome binary")
	return ""
}

// axeSource returns axe-core's script, or fails the test saying how to get it.
func axeSource(t *testing.T) string {
	t.Helper()
	p := os.Getenv(axeEnv)
	if p == "" {
		t.Fatalf("%s is not set: the browser tests check every page with axe-core; run scripts/test, which installs it "+
			"with npm and sets %s, or set it to the path of axe.min.js from the npm package axe-core", axeEnv, axeEnv)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%s: %v", axeEnv, err)
	}
	if !strings.Contains(string(b), "axe") {
		t.Fatalf("%s=%s does not look like axe-core", axeEnv, p)
	}
	return string(b)
}

// browser is one Chromium tab of a test.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string // the server's URL
	axe  string
	shot string // the screenshot directory
	docs bool   // also write docs/screenshots
	// axeRuns counts the pages axe-core checked, for the test's report.
	axeRuns int
}

// newBrowser starts a headless Chromium with a fresh profile for the test; it
// ends with the test.
func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	exe, axe := chromiumPath(t), axeSource(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(desktopW, desktopH),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-features", "Translate,MediaRouter,OptimizationHints"),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("lang", "en-US"),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(func(string, ...any) {}))
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
	})
	// Start the browser under a deadline of its own: the first action launches it,
	// and a context that ends would end the browser too.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start %s: %v", exe, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start within 30 s", exe)
	}
	b := &browser{t: t, ctx: ctx, base: base, axe: axe, shot: os.Getenv(screenshotsEnv), docs: os.Getenv(updateScreenshots) == "1"}
	if b.shot == "" {
		b.shot = t.TempDir()
	}
	if err := os.MkdirAll(b.shot, 0o755); err != nil {
		t.Fatal(err)
	}
	if b.docs {
		if err := os.MkdirAll(docsScreenshots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b.viewport(desktopW, desktopH, false)
	return b
}

// step runs the steps, bounded by stepTimeout; what names them in a failure.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v (page %s)", what, err, b.location())
	}
}

// run runs one action that returns a value, bounded by stepTimeout.
func run[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("%s: %v (page %s)", what, err, b.location())
	}
	return v
}

// location is the tab's URL, for messages; "?" when it cannot be read.
func (b *browser) location() string {
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	u, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return "?"
	}
	return u
}

// path is the tab's URL without the server's origin.
func (b *browser) path() string {
	b.t.Helper()
	return strings.TrimPrefix(run(b, "location", chromedp.Location()), b.base)
}

// open loads path and waits for its <main>.
func (b *browser) open(path string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.base+path), chromedp.WaitReady(chromedp.CSS("main")))
}

// submit clicks the element sel (a submit button), waits for the page it loads
// and returns that page's HTTP status.
func (b *browser) submit(sel string) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
	if err != nil {
		b.t.Fatalf("submit %s: %v (page %s)", sel, err, b.location())
	}
	b.do("wait for the page after "+sel, chromedp.WaitReady(chromedp.CSS("main")))
	if resp == nil {
		return 0
	}
	return resp.Status
}

// fill types v into the field sel, replacing what it holds. It types into the
// node itself (KeyEventNode) rather than through chromedp.SendKeys, which reads
// the node's attributes outside the node's lock while DOM events update them: a
// data race the race detector reports (chromedp v0.23.1, query.go).
func (b *browser) fill(sel, v string) {
	b.t.Helper()
	typeInto := chromedp.QueryAfter(chromedp.CSS(sel), func(ctx context.Context, t *chromedp.Target, nodes []*chromedp.Node) (chromedp.Void, error) {
		if len(nodes) == 0 {
			return chromedp.Void{}, fmt.Errorf("no node %s", sel)
		}
		return chromedp.KeyEventNode(nodes[0], v)(ctx, t)
	}, chromedp.NodeVisible)
	b.do("fill "+sel, chromedp.Clear(chromedp.CSS(sel)), typeInto)
}

// text is the visible text of sel.
func (b *browser) text(sel string) string {
	b.t.Helper()
	return run(b, "text of "+sel, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
}

// eval evaluates a JavaScript expression.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	return run(b, "evaluate "+firstLine(expr), chromedp.Evaluate[T](expr))
}

// waitFor polls a JavaScript predicate until it holds, for at most d.
func (b *browser) waitFor(what, predicate string, d time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate, chromedp.WithPollingInterval(100*time.Millisecond),
		chromedp.WithPollingTimeout(d))); err != nil {
		b.t.Fatalf("%s: not within %s: %v (page %s)", what, d, err, b.location())
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return s
}

// viewport sets the tab's size: a phone's with touch and the mobile viewport.
func (b *browser) viewport(w, h int64, phone bool) {
	b.t.Helper()
	opts := []chromedp.EmulateViewportOption{chromedp.EmulateScale(1)}
	if phone {
		opts = append(opts, chromedp.EmulateMobile)
	}
	b.do(fmt.Sprintf("viewport %dx%d", w, h), chromedp.EmulateViewport(w, h, opts...))
}

// axeViolation is what the test prints of an axe-core violation.
type axeViolation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	URL    string `json:"helpUrl"`
	Nodes  []struct {
		Target  []any  `json:"target"`
		HTML    string `json:"html"`
		Summary string `json:"failureSummary"`
	} `json:"nodes"`
}

// checkA11y injects axe-core into the page and runs it: a serious or critical
// violation fails the test, and every violation is printed.
func (b *browser) checkA11y(name string) {
	b.t.Helper()
	if !eval[bool](b, `typeof window.axe === "object"`) {
		ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
		_, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](b.axe))
		cancel()
		if err != nil {
			b.t.Fatalf("%s: inject axe-core: %v", name, err)
		}
	}
	const script = `axe.run(document, {resultTypes: ["violations"]}).then(r => JSON.stringify(r.violations.map(v => ({
		id: v.id, impact: v.impact, help: v.help, helpUrl: v.helpUrl,
		nodes: v.nodes.slice(0, 5).map(n => ({target: n.target, html: n.html.slice(0, 200), failureSummary: n.failureSummary}))}))))`
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](script, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("%s: axe.run: %v", name, err)
	}
	var vs []axeViolation
	if err := json.Unmarshal([]byte(out), &vs); err != nil {
		b.t.Fatalf("%s: axe result: %v: %s", name, err, out)
	}
	b.axeRuns++
	for _, v := range vs {
		msg := fmt.Sprintf("%s: axe %s (%s): %s %s", name, v.ID, v.Impact, v.Help, v.URL)
		for _, n := range v.Nodes {
			msg += fmt.Sprintf("\n\t%v %s\n\t\t%s", n.Target, n.HTML, strings.ReplaceAll(n.Summary, "\n", "\n\t\t"))
		}
		if v.Impact == "serious" || v.Impact == "critical" {
			b.t.Error(msg)
		} else {
			b.t.Log(msg)
		}
	}
}

// checkPhone asserts the page fits a phone's width: nothing but the tables'
// own scroll regions is wider than the screen.
func (b *browser) checkPhone(name string) {
	b.t.Helper()
	if w := eval[float64](b, `document.documentElement.scrollWidth`); w > phoneW {
		wide := eval[string](b, `Array.from(document.querySelectorAll("body *")).filter(e => e.getBoundingClientRect().right > `+
			fmt.Sprint(phoneW)+` && !e.closest(".table-wrap")).slice(0, 5).map(e => e.tagName + "." + e.className).join(", ")`)
		b.t.Errorf("%s: %v px wide at a phone's %d px: %s", name, w, phoneW, wide)
	}
}

// screenshots takes the page at desktop and at phone width, full length, as
// NAME-desktop.png and NAME-phone.png, and checks it fits the phone.
func (b *browser) screenshots(name string) {
	b.t.Helper()
	for _, v := range []struct {
		suffix string
		w, h   int64
		phone  bool
	}{{"desktop", desktopW, desktopH, false}, {"phone", phoneW, phoneH, true}} {
		b.viewport(v.w, v.h, v.phone)
		if v.phone {
			b.checkPhone(name)
		}
		png := run(b, "screenshot "+name, chromedp.FullScreenshot(100))
		file := name + "-" + v.suffix + ".png"
		if err := os.WriteFile(filepath.Join(b.shot, file), png, 0o644); err != nil {
			b.t.Fatal(err)
		}
		if b.docs {
			if err := os.WriteFile(filepath.Join(docsScreenshots, file), png, 0o644); err != nil {
				b.t.Fatal(err)
			}
		}
	}
	b.viewport(desktopW, desktopH, false)
}

// check runs axe-core on the page and takes its screenshots.
func (b *browser) check(name string) {
	b.t.Helper()
	b.checkA11y(name)
	b.screenshots(name)
}

// chromedpKey types keys into the focused element.
func chromedpKey(keys string) chromedp.Action[chromedp.Void] { return chromedp.KeyEvent(keys) }

// chromedpClick clicks the visible element sel.
func chromedpClick(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible)
}

// chromedpEval evaluates a JavaScript expression for its effect.
func chromedpEval(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](expr)
}
