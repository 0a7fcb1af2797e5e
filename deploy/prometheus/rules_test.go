// Package prometheus_test checks the Prometheus alerting rules of deploy/prometheus
// (issue #11): promtool accepts them (`promtool check rules`), their unit tests pass
// (`promtool test rules alerts_test.yaml`), every metric and label they name is one
// the project exports, and every alert follows the file's conventions (for:,
// severity, summary, description, a runbook_url whose anchor is a heading of
// docs/alerts.md).
//
// promtool is required: the tests fail, never skip, without it. scripts/test
// installs it (Debian's prometheus package, or `go install` of its promtool).
package prometheus_test

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client/clientmetrics"
	"github.com/idkeeper/idkeeper/gateway"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/protocol"
)

// The files, relative to this package's directory (go test runs in it).
const (
	rulesFile     = "alerts.yaml"
	rulesTestFile = "alerts_test.yaml"
	docsFile      = "../../docs/alerts.md"
	moduleRoot    = "../.."
)

// runbookPrefix is what every runbook_url starts with; the anchor follows.
const runbookPrefix = "https://github.com/idkeeper/idkeeper/blob/main/docs/alerts.md#"

// notYetExported are metrics the rules may name before the code that exports
// them has landed, with the labels the rules may select on.
var notYetExported = map[string][]string{
	// The Discord alert jobs of issue #11 (package alert) count their deliveries
	// here, by alert and result ("delivered" | "failed"); they are written at the
	// same time as these rules. Remove it from this list once the server
	// registers it in a way this test describes: the test then checks it like the
	// others (and says so meanwhile).
	"idkeeper_alert_deliveries_total": {"alert", "result"},
}

// knownValues are label values the rules select on that must be ones the code
// produces: a renamed phase or error code would otherwise make a rule silently
// match nothing.
var knownValues = map[string][]string{
	"phase": {string(idkeeper.PhaseStarting), string(idkeeper.PhaseUninitialised), string(idkeeper.PhaseRecovering),
		string(idkeeper.PhaseReady)},
	"code": {"OK", string(protocol.CodeNodeIDsExhausted), string(protocol.CodeClockSkewTooLarge),
		string(protocol.CodeAPIKeyInvalid), string(protocol.CodeAPIKeyExpired), string(protocol.CodeAPIKeyMissing)},
}

// promtool returns promtool's path, or fails the test saying how to install it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed (%v): it checks deploy/prometheus/alerts.yaml. scripts/test installs it; "+
			"by hand: `apt-get install -y --no-install-recommends prometheus` (Debian; promtool is /usr/bin/promtool), "+
			"or `go install github.com/prometheus/prometheus/cmd/promtool@v0.316.0` and put GOBIN on PATH", err)
	}
	return p
}

func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	bin := promtool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestPromtoolCheckRules(t *testing.T) {
	t.Parallel()
	out := runPromtool(t, "check", "rules", rulesFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool check rules %s did not report SUCCESS:\n%s", rulesFile, out)
	}
}

func TestPromtoolTestRules(t *testing.T) {
	t.Parallel()
	out := runPromtool(t, "test", "rules", rulesTestFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules %s did not report SUCCESS:\n%s", rulesTestFile, out)
	}
}

// rule is an alerting rule of alerts.yaml as the conventions check sees it.
type rule struct {
	name, expr, forDur, severity, runbook string
	summary, description                  bool
}

var (
	alertLine = regexp.MustCompile(`^\s*- alert:\s*(\S+)\s*$`)
	keyLine   = regexp.MustCompile(`^(\s*)(expr|for|severity|summary|description|runbook_url):\s*(.*)$`)
)

// readRules reads the alerting rules of alerts.yaml line by line. The file is
// YAML that promtool parses (TestPromtoolCheckRules); this reader only needs its
// layout: `- alert:` opens a rule, keys follow one per line, and an `expr: |`
// block runs while its lines are indented deeper than the key.
func readRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules []rule
	var cur *rule
	block, blockIndent := false, 0
	for line := range strings.SplitSeq(string(b), "\n") {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if block {
			if strings.TrimSpace(line) == "" || indent > blockIndent {
				cur.expr += strings.TrimSpace(line) + "\n"
				continue
			}
			block = false
		}
		if m := alertLine.FindStringSubmatch(line); m != nil {
			rules = append(rules, rule{name: m[1]})
			cur = &rules[len(rules)-1]
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil || cur == nil {
			continue
		}
		v := strings.TrimSpace(m[3])
		switch m[2] {
		case "expr":
			if v == "|" || v == "|-" || v == ">-" {
				block, blockIndent = true, len(m[1])
			} else {
				cur.expr = v
			}
		case "for":
			cur.forDur = v
		case "severity":
			cur.severity = v
		case "summary":
			cur.summary = v != ""
		case "description":
			cur.description = v != ""
		case "runbook_url":
			cur.runbook = v
		}
	}
	if len(rules) == 0 {
		t.Fatalf("no `- alert:` rules found in %s", rulesFile)
	}
	return rules
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestRulesConventions(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatalf("the runbooks: %v", err)
	}
	anchors := map[string]bool{}
	for line := range strings.SplitSeq(string(doc), "\n") {
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			anchors[githubAnchor(h)] = true
		}
	}
	seen := map[string]bool{}
	for _, r := range readRules(t) {
		if seen[r.name] {
			t.Errorf("%s: two rules of that name", r.name)
		}
		seen[r.name] = true
		if !strings.HasPrefix(r.name, "IdKeeper") {
			t.Errorf("%s: alert names start with IdKeeper", r.name)
		}
		if r.expr == "" {
			t.Errorf("%s: no expr", r.name)
		}
		if r.forDur == "" {
			t.Errorf("%s: no for: (write `for: 0m` for an alert that fires at once)", r.name)
		}
		if r.severity != "warning" && r.severity != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", r.name, r.severity)
		}
		if !r.summary || !r.description {
			t.Errorf("%s: annotations summary and description are required", r.name)
		}
		anchor, ok := strings.CutPrefix(r.runbook, runbookPrefix)
		switch {
		case !ok:
			t.Errorf("%s: runbook_url %q does not start with %s", r.name, r.runbook, runbookPrefix)
		case anchor != strings.ToLower(r.name):
			t.Errorf("%s: runbook_url anchor %q, want %q", r.name, anchor, strings.ToLower(r.name))
		case !anchors[anchor]:
			t.Errorf("%s: docs/alerts.md has no heading with the anchor #%s (add a heading `#### %s` under Runbooks)", r.name, anchor, r.name)
		}
	}
}

// metric is an exported metric: its variable labels, or unknown labels (nil) when
// it was found in the source only.
type metric struct {
	labels []string
	source string // where it was found
}

// descRecorder is a prometheus.Registerer that keeps the descriptions of what is
// registered with it and registers nothing: collectors are described, never
// collected, so the pool collectors need no registry behind them.
type descRecorder struct {
	metrics map[string]metric
	source  string
}

var descString = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

func (r *descRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		m := descString.FindStringSubmatch(d.String())
		if m == nil {
			continue
		}
		labels := []string{}
		for l := range strings.SplitSeq(m[2], ",") {
			if l = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "c("), ")"); l != "" {
				labels = append(labels, l)
			}
		}
		r.metrics[m[1]] = metric{labels: labels, source: r.source}
	}
	return nil
}

func (r *descRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *descRecorder) Unregister(prometheus.Collector) bool { return false }

// literalName is a metric name given whole as a string literal, e.g.
// `Name: "idkeeper_backup_failures_total"`.
var literalName = regexp.MustCompile(`"(idkeeper_[a-z0-9_]+)"`)

// exportedMetrics are the metrics the project's processes export. The registry's
// (http.Metrics with its pool and key-expiry collectors), the gateway's, the
// client session's and the standard collectors every idkeeper process registers
// (cmd/idkeeper newPromRegistry) are described in process, with their labels.
// Metrics named whole by a string literal in the module's other non-test Go files
// (`Name: "idkeeper_backup_failures_total"` in package main, which cannot be
// imported) are added with labels unknown.
func exportedMetrics(t *testing.T) map[string]metric {
	t.Helper()
	rec := &descRecorder{metrics: map[string]metric{}}
	rec.source = "http.NewMetrics"
	m := idkhttp.NewMetrics(rec)
	rec.source = "http.Metrics.CollectPool"
	m.CollectPool(nil) // describes only: no registry is read
	rec.source = "clientmetrics.NewCollector"
	rec.MustRegister(clientmetrics.NewCollector(nil))
	rec.source = "gateway.New"
	if _, err := gateway.New(nil, gateway.Options{Registerer: rec, Gatherer: prometheus.NewRegistry()}); err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	rec.source = "the collectors of every process (cmd/idkeeper newPromRegistry)"
	rec.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector())
	if _, ok := rec.metrics["idkeeper_nodes_free"]; !ok {
		t.Fatalf("the registry's pool gauges were not described: %d metrics found", len(rec.metrics))
	}

	err := filepath.WalkDir(moduleRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Other modules (bench) and what is not Go source.
			if n := d.Name(); path != moduleRoot && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules" ||
				n == "bench") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range literalName.FindAllStringSubmatch(string(b), -1) {
			if _, ok := rec.metrics[n[1]]; !ok {
				rec.metrics[n[1]] = metric{source: filepath.ToSlash(path)}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read the module's Go files: %v", err)
	}
	if _, ok := rec.metrics["idkeeper_backup_failures_total"]; !ok {
		t.Fatalf("the backup job's metrics were not found in %s", filepath.Join(moduleRoot, "cmd", "idkeeper"))
	}
	return rec.metrics
}

var (
	// metricToken is a metric name in the rules file: the project's and the
	// standard collectors' prefixes.
	metricToken = regexp.MustCompile(`\b((?:idkeeper|process|go)_[a-z0-9_]+)\b`)
	selector    = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	// plainAlternatives is a regular expression that only lists literal values.
	plainAlternatives = regexp.MustCompile(`^[A-Za-z0-9_-]+(\|[A-Za-z0-9_-]+)*$`)
	matcher           = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
)

// histogramSuffixes are the series of a histogram besides its name.
var histogramSuffixes = []string{"_bucket", "_count", "_sum"}

// lookup finds the metric that a series name of the rules belongs to: the name
// itself, or a histogram's _bucket, _count or _sum.
func lookup(metrics map[string]metric, name string) (metric, string, bool) {
	if m, ok := metrics[name]; ok {
		return m, name, true
	}
	for _, s := range histogramSuffixes {
		if base, ok := strings.CutSuffix(name, s); ok {
			if m, ok := metrics[base]; ok {
				return m, base, true
			}
		}
	}
	return metric{}, "", false
}

func TestRulesReferenceExportedMetrics(t *testing.T) {
	t.Parallel()
	metrics := exportedMetrics(t)
	for name, labels := range notYetExported {
		if m, ok := metrics[name]; ok {
			t.Logf("%s is in the source now (%s): drop it from notYetExported once it is registered", name, m.source)
			if m.labels == nil {
				metrics[name] = metric{labels: labels, source: m.source}
			}
			continue
		}
		metrics[name] = metric{labels: labels, source: "notYetExported"}
	}
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)

	// Every name in the file, comments and annotation queries included.
	var missing []string
	for _, n := range metricToken.FindAllStringSubmatch(text, -1) {
		if _, _, ok := lookup(metrics, n[1]); !ok && !slices.Contains(missing, n[1]) {
			missing = append(missing, n[1])
		}
	}
	if len(missing) > 0 {
		var have []string
		for n := range metrics {
			if strings.HasPrefix(n, "idkeeper_") {
				have = append(have, n)
			}
		}
		sort.Strings(have)
		t.Errorf("%s names metrics no idkeeper process exports: %s\nexported: %s", rulesFile,
			strings.Join(missing, ", "), strings.Join(have, ", "))
	}

	// Every label a selector of an expression matches on.
	rules := readRules(t)
	for _, r := range rules {
		for _, s := range selector.FindAllStringSubmatch(r.expr, -1) {
			m, base, ok := lookup(metrics, s[1])
			if !ok {
				continue // reported above, or a function's argument list
			}
			allowed := []string{"instance", "job"} // the scrape's target labels
			if m.labels == nil {
				allowed = nil // found in the source only: labels unknown
			} else {
				allowed = append(allowed, m.labels...)
				if slices.Contains(m.labels, "job") {
					// The metric's own job label clashes with the target label:
					// Prometheus stores it as exported_job.
					allowed = append(allowed, "exported_job")
				}
				if s[1] == base+"_bucket" {
					allowed = append(allowed, "le")
				}
			}
			for _, mm := range matcher.FindAllStringSubmatch(s[2], -1) {
				label, op, value := mm[1], mm[2], mm[3]
				if allowed != nil && !slices.Contains(allowed, label) {
					t.Errorf("%s: %s has no label %q (it has %v, and the target labels)", r.name, s[1], label, m.labels)
				}
				if vals, ok := knownValues[label]; ok && (op == "=" || op == "!=") && !slices.Contains(vals, value) {
					t.Errorf("%s: %s{%s%s%q}: the code never sets %s=%q (it sets %v)", r.name, s[1], label, op, value,
						label, value, vals)
				}
				if vals, ok := knownValues[label]; ok && (op == "=~" || op == "!~") && plainAlternatives.MatchString(value) {
					// A list of literal values: each must be one the code sets.
					for v := range strings.SplitSeq(value, "|") {
						if !slices.Contains(vals, v) {
							t.Errorf("%s: %s{%s%s%q}: the code never sets %s=%q (it sets %v)", r.name, s[1], label, op, value,
								label, v, vals)
						}
					}
				}
			}
		}
	}
}
