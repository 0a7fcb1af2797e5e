package main

import (
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
)

// Secrets stay out of argv and environment dumps: every flag that can carry a
// secret has a --NAME-file twin (IDKEEPER_NAME_FILE in the environment, the
// Docker-secrets convention) that names a file holding the value; a secret given
// on the command line itself shows in ps and shell history, and the command warns.

// envSetter is a flag.Value that tells a value from the environment from one on
// the command line (parseFlags calls SetFromEnv for the former).
type envSetter interface {
	SetFromEnv(v string) error
}

// secretFlag is a flag whose value may be a secret.
type secretFlag struct {
	name   string
	v      *string
	file   string
	set    bool // given, on the command line or in the environment
	argv   bool // given on the command line
	secret func(v string) bool
}

// secretVar registers --name (default def) and --name-file on fs. secret tells
// whether a value holds a secret (an API key always does; a store URL when it has a
// password).
func secretVar(fs *flag.FlagSet, v *string, name, def, usage string, secret func(string) bool) *secretFlag {
	*v = def
	s := &secretFlag{name: name, v: v, secret: secret}
	fs.Var(s, name, usage)
	fs.StringVar(&s.file, name+"-file", "", "file whose content (trailing newline dropped) is --"+name+": keeps the secret out of ps and the environment")
	return s
}

func (s *secretFlag) String() string {
	if s == nil || s.v == nil {
		return ""
	}
	return *s.v
}

func (s *secretFlag) Set(v string) error {
	*s.v, s.set, s.argv = v, true, true
	return nil
}

func (s *secretFlag) SetFromEnv(v string) error {
	*s.v, s.set = v, true
	return nil
}

// resolve reads the value from --name-file when given (then --name must not be),
// and returns the warning to log when a secret came on the command line.
func (s *secretFlag) resolve() (warning string, err error) {
	if s.file != "" {
		if s.set {
			return "", usagef("give --%s or --%s-file, not both", s.name, s.name)
		}
		v, err := readSecretFile(s.file)
		if err != nil {
			return "", usagef("--%s-file: %v", s.name, err)
		}
		*s.v = v
		return "", nil
	}
	if s.argv && s.secret(*s.v) {
		return fmt.Sprintf("--%s on the command line holds a secret, which shows in ps and shell history; use --%s-file "+
			"or %s (or %s_FILE)", s.name, s.name, envName(s.name), envName(s.name)), nil
	}
	return "", nil
}

// resolveSecrets resolves each flag and logs its warning.
func resolveSecrets(log *slog.Logger, flags ...*secretFlag) error {
	for _, f := range flags {
		w, err := f.resolve()
		if err != nil {
			return err
		}
		if w != "" {
			log.Warn(w)
		}
	}
	return nil
}

// readSecretFile returns the content of a secret file without its trailing line
// end; an empty file is an error.
func readSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	v := string(bytes.TrimRight(b, "\r\n"))
	if v == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return v, nil
}

// envSecret returns the secret in the environment variable name, or in the file
// that name_FILE names; both set is an error.
func envSecret(env lookupEnv, name string) (string, error) {
	v, ok := env(name)
	file, fok := env(name + "_FILE")
	switch {
	case ok && v != "" && fok && file != "":
		return "", usagef("set %s or %s_FILE, not both", name, name)
	case fok && file != "":
		s, err := readSecretFile(file)
		if err != nil {
			return "", usagef("%s_FILE: %v", name, err)
		}
		return s, nil
	}
	return v, nil
}

// always is the secret test of a flag that is always a secret.
func always(string) bool { return true }

// urlHasPassword is the secret test of a store URL.
func urlHasPassword(v string) bool {
	if !strings.Contains(v, "://") {
		return false
	}
	u, err := url.Parse(v)
	if err != nil {
		return strings.Contains(v, "@") // unparsable: assume the worst
	}
	_, has := u.User.Password()
	q := u.Query()
	return has || q.Get("password") != "" || q.Get("sentinel_password") != ""
}
