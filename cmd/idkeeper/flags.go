package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"

	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/redis"
)

// errHelp is returned when -h was asked for; the usage has been printed.
var errHelp = errors.New("help requested")

// envName is the environment variable of a flag: IDKEEPER_<FLAG>, upper case, "-"
// as "_".
func envName(flagName string) string {
	return "IDKEEPER_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// newFlagSet returns a FlagSet for one command whose errors are returned, not
// fatal, and whose usage (-h) lists the environment variable of every flag and
// the settings the command reads from the environment only (envOnlySettings).
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: idkeeper %s [flags]\n\n", name)
		printFlags(stderr, fs)
	}
	return fs
}

// printFlags writes fs's flag table, as every command's -h shows it, then the
// settings the command reads from the environment only.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "Flags (each also from the environment variable shown):")
	fs.VisitAll(func(f *flag.Flag) {
		if hiddenFlags[f.Name] {
			return
		}
		def := ""
		if f.DefValue != "" {
			def = " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(w, "  --%s  [%s]%s\n    \t%s\n", f.Name, envName(f.Name), def, f.Usage)
	})
	printEnvOnly(w, fs.Name())
}

// helpHint is the hint of a usage error of command (as newFlagSet names it).
func helpHint(command string) string { return "run 'idkeeper " + command + " -h' for help" }

// parseFlags parses args, then sets every flag not given on the command line from
// its environment variable, if set. -h prints the usage (fs.Usage) and returns
// errHelp. A mistake is a usageError of one line naming the flag as the help
// spells it (--name) or the variable, with helpHint: the usage is not printed.
func parseFlags(fs *flag.FlagSet, args []string, env lookupEnv) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return errHelp
	}
	if err != nil {
		return usagef("%s: %s (%s)", fs.Name(), flagError(err), helpHint(fs.Name()))
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected arguments %q (%s)", fs.Name(), fs.Args(), helpHint(fs.Name()))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		name := envName(f.Name)
		if v, ok := env(name); ok {
			var err error
			if es, isSecret := f.Value.(envSetter); isSecret {
				err = es.SetFromEnv(v)
			} else {
				err = fs.Set(f.Name, v)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("invalid value %q for %s: %v", v, name, err))
			}
		}
	})
	if len(errs) > 0 {
		return usagef("%s: %w (%s)", fs.Name(), errors.Join(errs...), helpHint(fs.Name()))
	}
	return nil
}

// flagError is an error of flag.FlagSet.Parse with the flag spelled as the help
// spells it, --name (the flag package writes -name).
func flagError(err error) string {
	s := err.Error()
	if name, ok := strings.CutPrefix(s, "flag provided but not defined: -"); ok {
		return "unknown flag --" + name
	}
	if name, ok := strings.CutPrefix(s, "flag needs an argument: -"); ok {
		return "--" + name + " needs a value"
	}
	if rest, ok := strings.CutPrefix(s, "invalid boolean flag "); ok {
		return "invalid boolean flag --" + rest
	}
	// invalid value "V" for flag -NAME: ERR, invalid boolean value "V" for -NAME: ERR
	for _, p := range [][2]string{{"invalid value ", " for flag -"}, {"invalid boolean value ", " for -"}} {
		rest, ok := strings.CutPrefix(s, p[0])
		if !ok {
			continue
		}
		q, qerr := strconv.QuotedPrefix(rest)
		if after, ok := strings.CutPrefix(rest[len(q):], p[1]); qerr == nil && ok {
			return "invalid value " + q + " for --" + after
		}
	}
	return s
}

// prefixesFlag is a comma-separated list of CIDR prefixes or addresses.
type prefixesFlag struct{ p *[]netip.Prefix }

func (f prefixesFlag) String() string {
	if f.p == nil {
		return ""
	}
	s := make([]string, len(*f.p))
	for i, p := range *f.p {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func (f prefixesFlag) Set(v string) error {
	ps, err := idkhttp.ParsePrefixes(v)
	if err != nil {
		return err
	}
	*f.p = ps
	return nil
}

// choiceFlag accepts one of a fixed set of words.
type choiceFlag struct {
	v       *string
	choices []string
}

func (f choiceFlag) String() string {
	if f.v == nil {
		return ""
	}
	return *f.v
}

func (f choiceFlag) Set(v string) error {
	for _, c := range f.choices {
		if strings.EqualFold(v, c) {
			*f.v = c
			return nil
		}
	}
	return fmt.Errorf("want one of %s", strings.Join(f.choices, ", "))
}

// logFlags are the logging flags every long-running command has.
type logFlags struct {
	level, format string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	l.level, l.format = "info", "text"
	fs.Var(choiceFlag{&l.level, []string{"debug", "info", "warn", "error"}}, "log-level", "lowest level logged: debug, info, warn or error (debug adds an access log)")
	fs.Var(choiceFlag{&l.format, []string{"text", "json"}}, "log-format", "log format: text or json")
}

// logger returns the slog.Logger the flags describe, writing to w, and makes it
// go-redis's logger too, so that no line escapes the format.
func (l *logFlags) logger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(l.level))
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: logAttr}
	log := slog.New(slog.NewTextHandler(w, opts))
	if l.format == "json" {
		log = slog.New(slog.NewJSONHandler(w, opts))
	}
	redis.RouteClientLogs(log)
	return log
}

// listFlag is a repeatable flag whose values append to v; each value, and so
// the environment's one value, may hold several separated by commas (a value
// holding a comma can therefore not be given). An empty element is an error
// naming what, or skipped when skipEmpty.
type listFlag struct {
	v         *[]string
	what      string
	skipEmpty bool
}

func (f listFlag) String() string {
	if f.v == nil {
		return ""
	}
	return strings.Join(*f.v, ",")
}

func (f listFlag) Set(v string) error {
	for e := range strings.SplitSeq(v, ",") {
		e = strings.TrimSpace(e)
		switch {
		case e != "":
			*f.v = append(*f.v, e)
		case !f.skipEmpty:
			return errors.New("empty " + f.what)
		}
	}
	return nil
}
