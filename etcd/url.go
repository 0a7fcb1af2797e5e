package etcd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The URL form Open dials (issue #17), like the Redis ones of DESIGN §11:
//
//	etcd://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT…][/PREFIX][?option=value…]
//	etcds://…   the same over TLS
//
// The hosts are the cluster's client endpoints (list several: the client fails
// over between them). PREFIX is the key prefix (Options.Prefix; "/" is added at
// its end; default "idkeeper/"). Options:
//
//	cacert=FILE         PEM bundle of the CAs that sign the members' certificates (etcds;
//	                    default: the system's roots)
//	cert=FILE&key=FILE  the client certificate and key (etcds; both or neither)
//	server_name=NAME    the name the members' certificates hold, when not the host's
//	dial_timeout=5s     how long a connection attempt may take (default 5 s)
//
// USER and PASSWORD are etcd's role-based authentication; a password in the URL
// shows in ps when the URL is a flag: pass the URL in the environment or a file.

// Schemes are the URL schemes Open dials.
var Schemes = []string{"etcd://", "etcds://"}

// MaxRequestBytes is the largest request the client sends: the members must
// accept it (--max-request-bytes=10485760), and allow the operations of the
// largest transaction (--max-txn-ops=32768): see doc.go.
const MaxRequestBytes = 10 << 20

// IsURL reports whether s is an etcd URL.
func IsURL(s string) bool {
	for _, p := range Schemes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// ParseURL returns the client configuration and the key prefix of an etcd URL.
// Its errors never repeat the URL, whose password they would show.
func ParseURL(raw string) (clientv3.Config, string, error) {
	var cfg clientv3.Config
	if !IsURL(raw) {
		return cfg, "", fmt.Errorf("etcd: the URL must start with %s", strings.Join(Schemes, " or "))
	}
	u, err := neturl.Parse(raw)
	if err != nil {
		return cfg, "", errors.New("etcd: bad URL: it does not parse")
	}
	if u.Host == "" {
		return cfg, "", errors.New("etcd: bad URL: no host")
	}
	for _, h := range strings.Split(u.Host, ",") {
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return cfg, "", fmt.Errorf("etcd: bad URL: endpoint %q needs HOST:PORT", h)
		}
		scheme := "http://"
		if u.Scheme == "etcds" {
			scheme = "https://"
		}
		cfg.Endpoints = append(cfg.Endpoints, scheme+h)
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
		if cfg.Username == "" {
			return cfg, "", errors.New("etcd: bad URL: a password needs a user name")
		}
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix == "" {
		prefix = DefaultPrefix
	} else {
		prefix += "/"
	}
	cfg.DialTimeout = 5 * time.Second
	cfg.MaxCallSendMsgSize = MaxRequestBytes
	cfg.MaxCallRecvMsgSize = 4 * MaxRequestBytes
	q := u.Query()
	var tlsFiles [3]string // cacert, cert, key
	for name, vals := range q {
		if len(vals) != 1 {
			return cfg, "", fmt.Errorf("etcd: bad URL: option %q given %d times", name, len(vals))
		}
		v := vals[0]
		switch name {
		case "cacert":
			tlsFiles[0] = v
		case "cert":
			tlsFiles[1] = v
		case "key":
			tlsFiles[2] = v
		case "server_name":
			if v == "" {
				return cfg, "", errors.New("etcd: bad URL: server_name is empty")
			}
		case "dial_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Millisecond || d > time.Minute {
				return cfg, "", fmt.Errorf("etcd: bad URL: dial_timeout %q: want 1ms..1m", v)
			}
			cfg.DialTimeout = d
		default:
			return cfg, "", fmt.Errorf("etcd: bad URL: unknown option %q (cacert, cert, key, server_name, dial_timeout)", name)
		}
	}
	if u.Scheme == "etcd" {
		if tlsFiles != [3]string{} || q.Has("server_name") {
			return cfg, "", errors.New("etcd: bad URL: cacert, cert, key and server_name need etcds://")
		}
		return cfg, prefix, nil
	}
	if cfg.TLS, err = tlsConfig(tlsFiles, q.Get("server_name")); err != nil {
		return cfg, "", err
	}
	return cfg, prefix, nil
}

// tlsConfig is the client's TLS: the CA bundle (or the system's roots), the
// client certificate when given.
func tlsConfig(files [3]string, serverName string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if files[0] != "" {
		pem, err := os.ReadFile(files[0])
		if err != nil {
			return nil, fmt.Errorf("etcd: cacert: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd: cacert %s holds no PEM certificate", files[0])
		}
	}
	if (files[1] == "") != (files[2] == "") {
		return nil, errors.New("etcd: bad URL: give cert and key together")
	}
	if files[1] != "" {
		pair, err := tls.LoadX509KeyPair(files[1], files[2])
		if err != nil {
			return nil, fmt.Errorf("etcd: client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// Open connects to the etcd cluster of url (ParseURL) and returns the store
// over it, which closes the client on Close. Options.Prefix, when empty, is
// the URL's. It does not wait for the cluster: the first call does.
func Open(url string, opts Options) (*Store, error) {
	cfg, prefix, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = prefix
	}
	// The client's own logger retries and warns on every failed call; the store
	// returns those failures, which its callers log.
	cfg.Logger = zap.NewNop()
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	opts.CloseClient = true
	s, err := New(c, opts)
	if err != nil {
		c.Close()
		return nil, err
	}
	return s, nil
}

// RedactURL hides the password of an etcd URL, for messages and logs. A URL that
// does not parse is not shown at all: where its password is cannot be told.
func RedactURL(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	if u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = neturl.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
