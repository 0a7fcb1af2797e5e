package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
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
// fatal, and whose usage lists the environment variable of every flag.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: idkeeper %s [flags]\n\nFlags (each also from the environment variable shown):\n", name)
		fs.VisitAll(func(f *flag.Flag) {
			if hiddenFlags[f.Name] {
				return
			}
			def := ""
			if f.DefValue != "" {
				def = " (default " + f.DefValue + ")"
			}
			fmt.Fprintf(stderr, "  --%s  [%s]%s\n    \t%s\n", f.Name, envName(f.Name), def, f.Usage)
		})
	}
	return fs
}

// parseFlags parses args, then sets every flag not given on the command line from
// its environment variable, if set. A bad value names the flag or the variable.
func parseFlags(fs *flag.FlagSet, args []string, env lookupEnv) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		// The flag package has printed the error and the usage already.
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected arguments %q", fs.Name(), fs.Args())
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
		return usageError{errors.Join(errs...)}
	}
	return nil
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
