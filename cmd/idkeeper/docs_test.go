package main

// The operations guide's references are checked against the code, both ways:
// every flag of every command is in docs/operations.md's settings reference with
// its environment variable and default, and every flag written there is a real one;
// every metric a process exports is in its metrics reference, with its labels, and
// every metric written there is exported; every link to a heading of the guide (and
// of docs/client.md) finds it.

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper/client/clientmetrics"
	"github.com/idkeeper/idkeeper/gateway"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/server"
)

const (
	operationsDoc = "../../docs/operations.md"
	clientDoc     = "../../docs/client.md"
	moduleRoot    = "../.."
)

// Headings (their start) of the settings reference's sections.
const (
	secLogging  = "Logging flags"
	secStore    = "Store flags"
	secServer   = "Server flags"
	secTestOnly = "Test-only settings"
	secEnvOnly  = "Settings only in the environment"
)

// docCommands are the commands with flags, and the sections of the settings
// reference whose tables must hold them. Hidden flags (hiddenFlags) belong in the
// section secTestOnly, whatever the command.
var docCommands = []struct {
	path     []string
	sections []string
}{
	{[]string{"server"}, []string{"`idkeeper server`", secLogging}},
	{[]string{"gateway"}, []string{"`idkeeper gateway`", secLogging}},
	{[]string{"dev"}, []string{"`idkeeper dev`", secLogging}},
	{[]string{"init"}, []string{"`idkeeper init`", secStore, secLogging}},
	{[]string{"clock-agent"}, []string{"`idkeeper clock-agent`", secLogging}},
	{[]string{"apikey", "create"}, []string{"`idkeeper apikey`", secStore, secServer, secLogging}},
	{[]string{"apikey", "list"}, []string{"`idkeeper apikey`", secStore, secServer, secLogging}},
	{[]string{"apikey", "revoke"}, []string{"`idkeeper apikey`", secStore, secServer, secLogging}},
	{[]string{"users", "list"}, []string{"`idkeeper users`", secStore, secServer, secLogging}},
	{[]string{"users", "add"}, []string{"`idkeeper users`", secStore, secServer, secLogging}},
	{[]string{"users", "disable"}, []string{"`idkeeper users`", secStore, secServer, secLogging}},
	{[]string{"users", "enable"}, []string{"`idkeeper users`", secStore, secServer, secLogging}},
	{[]string{"users", "set-role"}, []string{"`idkeeper users`", secStore, secServer, secLogging}},
	{[]string{"users", "reset-password"}, []string{"`idkeeper users`", secStore, secServer, secLogging}},
	{[]string{"audit", "verify"}, []string{"`idkeeper audit`", secStore, secLogging}},
	{[]string{"audit", "list"}, []string{"`idkeeper audit`", secStore, secLogging}},
	{[]string{"backup", "export"}, []string{"`idkeeper backup`", secStore, secServer, secLogging}},
	{[]string{"backup", "import"}, []string{"`idkeeper backup`", secStore, secServer, secLogging}},
	{[]string{"probe"}, []string{"`idkeeper probe`"}},
	{[]string{"decode"}, []string{"`idkeeper decode`", secLogging}},
	{[]string{"bench"}, []string{"`idkeeper bench`", secLogging}},
}

// flagless are the commands of the usage that have no flags.
var flagless = []string{"version"}

// noSuchFlag is given to every command after a hidden flag: parsing it fails
// before the command does anything, naming it when the hidden flag is defined.
const noSuchFlag = "idkeeper-docs-test-no-such-flag"

// cmdFlag is a flag as a command's usage shows it.
type cmdFlag struct {
	env string // its environment variable; "" when the command reads none
	def string // its default; "" when the usage shows none
}

var (
	usageFlagLine = regexp.MustCompile(`^  --([a-z][a-z0-9-]*)(.*)$`)
	usageEnv      = regexp.MustCompile(`\[(IDKEEPER_[A-Z0-9_]+)\]`)
	usageDefault  = regexp.MustCompile(`\(default ([^()]*)\)\s*$`)
)

// commandFlags runs the command with -h and returns the flags its usage lists,
// with the hidden flags (hiddenFlags) that it defines.
func commandFlags(t *testing.T, path []string) map[string]cmdFlag {
	t.Helper()
	var stdout, stderr bytes.Buffer
	noEnv := func(string) (string, bool) { return "", false }
	if code := run(context.Background(), append(slices.Clone(path), "-h"), noEnv, &stdout, &stderr); code != exitOK {
		t.Fatalf("idkeeper %s -h: exit %d; stderr:\n%s", strings.Join(path, " "), code, stderr.String())
	}
	flags := map[string]cmdFlag{}
	for line := range strings.SplitSeq(stdout.String()+stderr.String(), "\n") {
		m := usageFlagLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		f := cmdFlag{}
		if e := usageEnv.FindStringSubmatch(m[2]); e != nil {
			f.env = e[1]
		}
		if d := usageDefault.FindStringSubmatch(m[2]); d != nil {
			f.def = d[1]
		}
		flags[m[1]] = f
	}
	if len(flags) == 0 {
		t.Fatalf("idkeeper %s: no flag found in its usage:\n%s", strings.Join(path, " "), stderr.String())
	}
	// The hidden flags' defaults: they are registered by unsafeFlags.
	hidden := flag.NewFlagSet("hidden", flag.ContinueOnError)
	new(unsafeFlags).register(hidden)
	for name := range hiddenFlags {
		// Defined: the command takes it and fails on noSuchFlag after it.
		stderr.Reset()
		run(context.Background(), append(slices.Clone(path), "--"+name+"=1", "--"+noSuchFlag), noEnv, &stdout, &stderr)
		if !strings.Contains(stderr.String(), "unknown flag --"+name) && !strings.Contains(stderr.String(), "not defined: -"+name) {
			f := cmdFlag{env: envName(name)}
			if h := hidden.Lookup(name); h != nil {
				f.def = h.DefValue
			}
			flags[name] = f
		}
	}
	return flags
}

// mdSection is a part of a Markdown file: the lines under a heading, up to the
// next heading of the same or a higher level.
type mdSection struct {
	heading string
	lines   []string
}

var mdHeading = regexp.MustCompile(`^(#{1,6}) (.+?)\s*$`)

// headings returns the headings of a Markdown text, outside fenced code blocks,
// with their levels and line numbers.
func headings(lines []string) (texts []string, levels, at []int) {
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if m := mdHeading.FindStringSubmatch(l); m != nil && !fenced {
			texts, levels, at = append(texts, m[2]), append(levels, len(m[1])), append(at, i)
		}
	}
	return texts, levels, at
}

// section returns the section of lines whose heading starts with prefix, within
// the lines given; ok is false when there is none.
func section(lines []string, prefix string) (mdSection, bool) {
	texts, levels, at := headings(lines)
	for i, h := range texts {
		if !strings.HasPrefix(h, prefix) {
			continue
		}
		end := len(lines)
		for j := i + 1; j < len(texts); j++ {
			if levels[j] <= levels[i] {
				end = at[j]
				break
			}
		}
		return mdSection{heading: h, lines: lines[at[i]+1 : end]}, true
	}
	return mdSection{}, false
}

// rows returns the body rows of the Markdown tables of a section, split into
// cells (header and separator rows left out).
func (s mdSection) rows() [][]string {
	var out [][]string
	header := true
	for _, l := range s.lines {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "|") {
			header = true
			continue
		}
		if header { // the first row of a table
			header = false
			continue
		}
		if strings.HasPrefix(l, "|---") || strings.HasPrefix(l, "| ---") {
			continue
		}
		cells := strings.Split(strings.Trim(strings.ReplaceAll(l, `\|`, "\x00"), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(strings.ReplaceAll(cells[i], "\x00", "|"))
		}
		out = append(out, cells)
	}
	return out
}

var (
	codeFlag  = regexp.MustCompile("^`--([a-z][a-z0-9-]*)`$")
	anyFlag   = regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])--([a-z][a-z0-9-]*)`)
	codeSpan  = regexp.MustCompile("`([^`]+)`")
	envToken  = regexp.MustCompile(`\bIDKEEPER_[A-Z0-9_]+\b`)
	envString = regexp.MustCompile(`"(IDKEEPER_[A-Z0-9_]+)"`)
)

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}

// sameDefault reports whether a default written in the guide is the code's:
// equal, or the same duration or number written another way (48h, 48h0m0s).
func sameDefault(doc, code string) bool {
	if doc == code {
		return true
	}
	if a, err := time.ParseDuration(doc); err == nil {
		b, err := time.ParseDuration(code)
		return err == nil && a == b
	}
	if a, err := strconv.ParseFloat(doc, 64); err == nil {
		b, err := strconv.ParseFloat(code, 64)
		return err == nil && a == b
	}
	return false
}

// TestDocsSettingsReference checks docs/operations.md's "Settings reference"
// against the commands: every flag of every command (as its usage lists it, and
// the hidden ones) has a row in its command's section, or a shared section the
// command has, naming its environment variable and, when the code has one, its
// default; every flag a row names is a flag of a command of that section; every
// --flag and IDKEEPER_ variable written anywhere in the reference exists; every
// environment variable the commands read by name (IDKEEPER_ADMIN_PASSWORD, …) is
// in the table of settings only in the environment.
func TestDocsSettingsReference(t *testing.T) {
	ref, ok := section(readLines(t, operationsDoc), "Settings reference")
	if !ok {
		t.Fatalf("%s has no section \"Settings reference\"", operationsDoc)
	}
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	// Every command of the usage is known here.
	known := map[string]bool{}
	for _, c := range docCommands {
		known[c.path[0]] = true
	}
	for _, c := range flagless {
		known[c] = true
	}
	inCommands := false
	for line := range strings.SplitSeq(usage, "\n") {
		switch {
		case strings.HasPrefix(line, "Commands:"):
			inCommands = true
		case inCommands && strings.HasPrefix(line, "  "):
			if name := strings.Fields(line)[0]; !known[name] {
				report("the command %q of idkeeper's usage is not in docCommands of docs_test.go: add it, and its flags to the settings reference", name)
			}
		case inCommands && strings.TrimSpace(line) == "":
			inCommands = false
		}
	}

	// The sections and their rows, by flag.
	type row struct {
		section string
		cells   []string
	}
	sectionRows := map[string]map[string]row{} // section prefix → flag → row
	sectionCommands := map[string][]string{}   // section prefix → commands using it
	sectionOf := func(prefix string) map[string]row {
		if r, ok := sectionRows[prefix]; ok {
			return r
		}
		s, ok := section(ref.lines, prefix)
		if !ok {
			report("the settings reference has no section whose heading starts with %q", prefix)
		}
		byFlag := map[string]row{}
		for _, cells := range s.rows() {
			m := codeFlag.FindStringSubmatch(cells[0])
			if m == nil {
				report("section %q: a row whose first cell is not one `--flag`: %q", s.heading, cells[0])
				continue
			}
			if len(cells) < 5 {
				report("section %q: the row of --%s has %d cells, want 5 (flag, environment, default, range, meaning)", s.heading, m[1], len(cells))
				continue
			}
			if _, dup := byFlag[m[1]]; dup {
				report("section %q: --%s has two rows", s.heading, m[1])
			}
			byFlag[m[1]] = row{section: s.heading, cells: cells}
		}
		sectionRows[prefix] = byFlag
		return byFlag
	}

	for _, c := range docCommands {
		for _, sec := range c.sections {
			sectionOf(sec)
		}
	}
	sectionOf(secTestOnly)

	allFlags := map[string]bool{}               // every flag of every command, hidden ones included
	envs := map[string]bool{}                   // every flag's environment variable
	cmdFlags := map[string]map[string]cmdFlag{} // command → its flags
	for _, c := range docCommands {
		cmd := strings.Join(c.path, " ")
		flags := commandFlags(t, c.path)
		cmdFlags[cmd] = flags
		for _, sec := range append(slices.Clone(c.sections), secTestOnly) {
			sectionCommands[sec] = append(sectionCommands[sec], cmd)
		}
		for name, f := range flags {
			allFlags[name] = true
			envs[envName(name)] = true
			secs := c.sections
			if hiddenFlags[name] {
				secs = []string{secTestOnly}
			}
			var r row
			found := false
			for _, sec := range secs {
				if r, found = sectionOf(sec)[name]; found {
					break
				}
			}
			if !found {
				report("idkeeper %s: --%s is not in the settings reference (sections %q)", cmd, name, secs)
				continue
			}
			env := r.cells[1]
			switch {
			case f.env != "" && !strings.Contains(env, "`"+f.env+"`"):
				report("idkeeper %s: the row of --%s in %q names the environment %q, want `%s`", cmd, name, r.section, env, f.env)
			case f.env == "" && envToken.MatchString(env):
				report("idkeeper %s: the row of --%s in %q names the environment %q, but the command reads none", cmd, name, r.section, env)
			}
			if f.def != "" {
				m := codeSpan.FindStringSubmatch(r.cells[2])
				if m == nil || !sameDefault(m[1], f.def) {
					report("idkeeper %s: the row of --%s in %q gives the default %q, the code's is %q (write it first, in backticks)",
						cmd, name, r.section, r.cells[2], f.def)
				}
			}
		}
	}

	// Every row names a flag of a command of its section.
	for sec, byFlag := range sectionRows {
		for name, r := range byFlag {
			ok := false
			for _, cmd := range sectionCommands[sec] {
				if _, has := cmdFlags[cmd][name]; has && (sec != secTestOnly || hiddenFlags[name]) {
					ok = true
					break
				}
			}
			if !ok {
				report("section %q: --%s is no flag of %s", r.section, name, strings.Join(sectionCommands[sec], ", "))
			}
		}
	}

	// Every --flag and IDKEEPER_ variable written anywhere in the reference exists.
	named := map[string]bool{} // variables the commands read by name, themselves or through package server
	for _, p := range append(goFiles(t, ".", false), goFiles(t, filepath.Join(moduleRoot, "server"), false)...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range envString.FindAllStringSubmatch(string(b), -1) {
			named[m[1]] = true
		}
	}
	text := strings.Join(ref.lines, "\n")
	for _, m := range anyFlag.FindAllStringSubmatch(text, -1) {
		if !allFlags[m[1]] {
			report("the settings reference mentions --%s, which no command has", m[1])
			allFlags[m[1]] = true // once
		}
	}
	for _, v := range envToken.FindAllString(text, -1) {
		base, _ := strings.CutSuffix(v, "_FILE")
		if !envs[v] && !named[v] && !named[base] {
			report("the settings reference mentions %s, which no command reads", v)
			envs[v] = true // once
		}
	}

	// The variables read by name are in the table of settings only in the environment.
	envOnly, ok := section(ref.lines, secEnvOnly)
	if !ok {
		report("the settings reference has no section %q", secEnvOnly)
	}
	listed := map[string]bool{}
	for _, cells := range envOnly.rows() {
		for _, v := range envToken.FindAllString(cells[0], -1) {
			listed[v] = true
		}
	}
	for v := range named {
		if !listed[v] {
			report("%s is read from the environment (cmd/idkeeper) but not in the table %q", v, secEnvOnly)
		}
	}

	if len(problems) > 0 {
		sort.Strings(problems)
		t.Errorf("%s, settings reference: %d problems:\n  %s", operationsDoc, len(problems), strings.Join(problems, "\n  "))
	}
}

// goFiles returns the non-test Go files under dir; recursive walks skip other
// modules (bench), testdata, hidden directories and the chaos suite's programs.
func goFiles(t *testing.T, dir string, recursive bool) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == dir {
				return nil
			}
			n := d.Name()
			if !recursive || strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules" || n == "bench" ||
				filepath.ToSlash(path) == filepath.ToSlash(filepath.Join(moduleRoot, "internal", "chaos")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// descRecorder is a prometheus.Registerer that keeps the names and labels of
// what is registered with it: collectors are described, never collected.
type descRecorder struct{ metrics map[string][]string }

var descFields = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

func (r *descRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		m := descFields.FindStringSubmatch(d.String())
		if m == nil {
			continue
		}
		labels := []string{}
		for l := range strings.SplitSeq(m[2], ",") {
			if l = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "c("), ")"); l != "" {
				labels = append(labels, l)
			}
		}
		sort.Strings(labels)
		r.metrics[m[1]] = labels
	}
	return nil
}

func (r *descRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *descRecorder) Unregister(prometheus.Collector) bool { return false }

// metricName is a metric named whole by a string literal in a Name: field or a
// prometheus.NewDesc call.
var metricName = regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(idkeeper_[a-z0-9_]+)"`)

// exportedMetrics are the metrics idkeeper's processes export, with their labels
// where they are described in process (nil where they are only found in the
// source).
func exportedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	rec := &descRecorder{metrics: map[string][]string{}}
	m := idkhttp.NewMetrics(rec)
	m.CollectPool(nil) // describes only
	rec.MustRegister(clientmetrics.NewCollector(nil))
	if _, err := gateway.New(nil, gateway.Options{Registerer: rec, Gatherer: prometheus.NewRegistry()}); err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	server.RegisterJobMetrics(rec)
	for _, want := range []string{"idkeeper_alloc_total", "idkeeper_nodes_free", "idkeeper_client_healthy",
		"idkeeper_gateway_requests_total", "idkeeper_backup_failures_total", "idkeeper_clock_verified"} {
		if _, ok := rec.metrics[want]; !ok {
			t.Fatalf("%s was not described in process: %d metrics found", want, len(rec.metrics))
		}
	}
	for _, p := range goFiles(t, moduleRoot, true) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range metricName.FindAllStringSubmatch(string(b), -1) {
			if _, ok := rec.metrics[n[1]]; !ok {
				rec.metrics[n[1]] = nil
			}
		}
	}
	return rec.metrics
}

var docMetric = regexp.MustCompile("^`(idkeeper_[a-z0-9_]+)`$")

// TestDocsMetricsReference checks docs/operations.md's "Metrics reference"
// against the code: every metric the registry, the gateway, the client library's
// collector, the backup job and the clock check export (described in process) and
// every metric named by a literal in the module's source has a row there, with the
// labels it has; every row names an exported metric.
func TestDocsMetricsReference(t *testing.T) {
	ref, ok := section(readLines(t, operationsDoc), "Metrics reference")
	if !ok {
		t.Fatalf("%s has no section \"Metrics reference\"", operationsDoc)
	}
	exported := exportedMetrics(t)
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	documented := map[string]bool{}
	for _, cells := range ref.rows() {
		m := docMetric.FindStringSubmatch(cells[0])
		if m == nil {
			report("a row whose first cell is not one `idkeeper_…` metric: %q", cells[0])
			continue
		}
		name := m[1]
		if documented[name] {
			report("%s has two rows", name)
		}
		documented[name] = true
		labels, ok := exported[name]
		if !ok {
			report("%s is in the reference, but no idkeeper process exports it", name)
			continue
		}
		if len(cells) < 4 {
			report("the row of %s has %d cells, want 4 (metric, type, labels, meaning)", name, len(cells))
			continue
		}
		if labels == nil {
			continue // found in the source only: labels unknown
		}
		var doc []string
		for _, l := range codeSpan.FindAllStringSubmatch(cells[2], -1) {
			doc = append(doc, l[1])
		}
		sort.Strings(doc)
		if !slices.Equal(doc, labels) {
			report("%s: the reference gives the labels %q, the code has %q", name, doc, labels)
		}
	}
	for name := range exported {
		if !documented[name] {
			report("%s is exported but not in the metrics reference", name)
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		t.Errorf("%s, metrics reference: %d problems:\n  %s", operationsDoc, len(problems), strings.Join(problems, "\n  "))
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading (before duplicates
// get their -1, -2 suffix).
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

// anchors returns the anchors of a Markdown file's headings.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	texts, _, _ := headings(readLines(t, path))
	out := map[string]bool{}
	for _, h := range texts {
		a := githubAnchor(h)
		for i := 1; out[a]; i++ {
			a = fmt.Sprintf("%s-%d", githubAnchor(h), i)
		}
		out[a] = true
	}
	return out
}

var mdLink = regexp.MustCompile(`\]\(([A-Za-z0-9_./-]*\.md)?#([^)\s]+)\)`)

// TestDocsAnchors checks that every link to a heading of docs/operations.md or
// docs/client.md, from the docs, the README and those two files themselves, finds
// its heading: reorganising the guide must not break the links into it.
func TestDocsAnchors(t *testing.T) {
	targets := map[string]map[string]bool{
		"operations.md": anchors(t, operationsDoc),
		"client.md":     anchors(t, clientDoc),
	}
	files, err := filepath.Glob(filepath.Join(moduleRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(moduleRoot, "README.md"))
	var problems []string
	for _, f := range files {
		for i, line := range readLines(t, f) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := filepath.Base(m[1])
				if m[1] == "" {
					target = filepath.Base(f) // a link within the file
				}
				want, checked := targets[target]
				if !checked {
					continue
				}
				if !want[m[2]] {
					problems = append(problems, fmt.Sprintf("%s:%d: %s#%s names no heading", f, i+1, target, m[2]))
				}
			}
		}
	}
	if len(problems) > 0 {
		t.Errorf("links to headings that do not exist:\n  %s", strings.Join(problems, "\n  "))
	}
}
