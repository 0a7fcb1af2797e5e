package main

import (
	"flag"
	"log/slog"

	"github.com/idkeeper/idkeeper/internal/httpserve"
	"github.com/idkeeper/idkeeper/internal/tlsfiles"
)

// listenFlags are the listener settings the server and the gateway share: TLS and
// where /metrics is served.
type listenFlags struct {
	certFile, keyFile string
	metrics           string // --metrics-listen; "": /metrics on the API listener
}

func (l *listenFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.certFile, "tls-cert", "", "PEM certificate (chain) to serve HTTPS with, TLS 1.2 at least; read again when the file changes (with --tls-key)")
	fs.StringVar(&l.keyFile, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&l.metrics, "metrics-listen", "", "serve /metrics on this host:port instead of the API listener (plain HTTP)")
}

// load reads the certificate pair (both files or neither) into the listeners'
// settings.
func (l *listenFlags) load(log *slog.Logger) (httpserve.Net, error) {
	out := httpserve.Net{Metrics: l.metrics}
	if (l.certFile == "") != (l.keyFile == "") {
		return out, usageError{tlsfiles.ErrHalfPair}
	}
	if l.certFile == "" {
		return out, nil
	}
	c, err := tlsfiles.Load(l.certFile, l.keyFile, log)
	if err != nil {
		return out, usageError{err}
	}
	out.TLS = c.ServerConfig()
	return out, nil
}
