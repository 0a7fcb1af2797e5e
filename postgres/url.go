package postgres

import (
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The URL form Open dials (issue #32), libpq's connection URI:
//
//	postgres://[USER[:PASSWORD]@]HOST[:PORT][,HOST[:PORT]…][/DATABASE][?option=value…]
//	postgresql://…   the same
//
// Every option of libpq that pgx understands works (its names, its meaning):
// sslmode (disable, allow, prefer, require, verify-ca, verify-full; pgx's
// default is prefer), sslrootcert, sslcert, sslkey, sslpassword, sslsni,
// connect_timeout, target_session_attrs (read-write: with several hosts, the
// primary), application_name, passfile, service, and pgxpool's pool_max_conns,
// pool_min_conns, pool_max_conn_lifetime, pool_max_conn_idle_time and
// pool_health_check_period; any other name is sent to the server as a setting of
// the session, which refuses a name it does not know. The PG* environment
// variables (PGHOST, PGPASSWORD, PGPASSFILE, PGSSLMODE, …) fill what the URL
// leaves out, as for psql.
//
// The options of IdKeeper's own, taken out before the rest goes to pgx:
//
//	schema=NAME          the schema that holds the store's tables (default idkeeper): lower-case
//	                     letters, digits and _, not starting with a digit, at most 63 bytes.
//	                     Several stores may share a database, each in a schema of its own
//	password_file=FILE   a file holding the password (its first line); not with a password in
//	                     the URL
//
// A password can so come from the URL, password_file, passfile (libpq's
// .pgpass format) or PGPASSWORD; a password in a URL given as a flag shows in ps:
// pass the URL in the environment or a file (IDKEEPER_STORE, --store-file), or
// the password alone in password_file or PGPASSWORD.

// Schemes are the URL schemes Open dials.
var Schemes = []string{"postgres://", "postgresql://"}

// DefaultSchema holds the store's tables when the URL names none.
const DefaultSchema = "idkeeper"

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// IsURL reports whether s is a PostgreSQL URL.
func IsURL(s string) bool {
	for _, p := range Schemes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// Config is what ParseURL makes of a URL.
type Config struct {
	Pool   *pgxpool.Config
	Schema string
}

// ParseURL returns the pool configuration and the schema of a PostgreSQL URL.
// Its errors never repeat the password.
func ParseURL(raw string) (Config, error) {
	if !IsURL(raw) {
		return Config{}, fmt.Errorf("postgres: the URL must start with %s", strings.Join(Schemes, " or "))
	}
	u, err := neturl.Parse(raw)
	if err != nil {
		// url.Error repeats the URL; the reason alone is enough.
		return Config{}, errors.New("postgres: bad URL: it does not parse")
	}
	secret := ""
	if u.User != nil {
		secret, _ = u.User.Password()
	}
	q := u.Query()
	if secret == "" {
		secret = q.Get("password")
	}
	schema := DefaultSchema
	if vals, ok := q["schema"]; ok {
		if len(vals) != 1 || !schemaName.MatchString(vals[0]) {
			return Config{}, errors.New("postgres: bad URL: schema must be one name of lower-case letters, digits and _ " +
				"(not starting with a digit, at most 63 bytes)")
		}
		schema = vals[0]
		q.Del("schema")
	}
	var fromFile string
	if vals, ok := q["password_file"]; ok {
		if len(vals) != 1 || vals[0] == "" {
			return Config{}, errors.New("postgres: bad URL: password_file names one file")
		}
		if secret != "" {
			return Config{}, errors.New("postgres: bad URL: a password in the URL and password_file: give one")
		}
		b, err := os.ReadFile(vals[0])
		if err != nil {
			return Config{}, fmt.Errorf("postgres: password_file: %w", err)
		}
		fromFile, _, _ = strings.Cut(string(b), "\n")
		fromFile = strings.TrimSuffix(fromFile, "\r")
		if fromFile == "" {
			return Config{}, fmt.Errorf("postgres: password_file %s holds no password on its first line", vals[0])
		}
		q.Del("password_file")
	}
	for name, vals := range q {
		if len(vals) != 1 {
			return Config{}, fmt.Errorf("postgres: bad URL: option %q given %d times", name, len(vals))
		}
	}
	// Encode writes a space as "+", which libpq's URI form (and pgx) read as a
	// plus sign; a plus sign itself it writes as %2B.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return Config{}, fmt.Errorf("postgres: bad URL: %s", redact(err.Error(), secret))
	}
	if fromFile != "" {
		cfg.ConnConfig.Password = fromFile
	}
	return Config{Pool: cfg, Schema: schema}, nil
}

// redact removes secret, as given and URL-escaped, from msg.
func redact(msg, secret string) string {
	if secret == "" {
		return msg
	}
	for _, s := range []string{secret, neturl.QueryEscape(secret), neturl.PathEscape(secret),
		neturl.UserPassword("", secret).String()[1:]} {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return msg
}

// RedactURL hides the password of a PostgreSQL URL, for messages and logs. A URL
// that does not parse is not shown at all: where its password is cannot be told.
func RedactURL(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		// Encode writes a space as "+", which libpq's URI form (and pgx) read as a
		// plus sign; a plus sign itself it writes as %2B.
		u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = neturl.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	return u.String()
}
