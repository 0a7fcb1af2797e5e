package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/tracing"
)

// traces is a process's OpenTelemetry tracing (package tracing): on only when
// the standard OTEL_* environment asks for it.
type traces struct {
	on       bool
	shutdown func(context.Context) error
}

// startTracing installs the tracer provider the environment asks for, if any,
// and logs it. An OTEL_* setting it cannot honour stops the start.
func startTracing(env lookupEnv, service, version string, log *slog.Logger) (*traces, error) {
	shutdown, err := tracing.Setup(context.Background(), tracing.Env(env), service, version)
	if err != nil {
		return nil, usageError{err}
	}
	t := &traces{on: tracing.Enabled(tracing.Env(env)), shutdown: shutdown}
	if t.on {
		log.Info("OpenTelemetry tracing on (OTEL_* environment)", "service", service)
	}
	return t, nil
}

// handler traces h's requests when tracing is on; h itself otherwise, so that
// tracing costs nothing when off.
func (t *traces) handler(h http.Handler, name string) http.Handler {
	if t == nil || !t.on {
		return h
	}
	return tracing.Handler(h, name)
}

// transport traces the client library's requests through rt when tracing is on
// (client.Config.WrapTransport); rt itself otherwise.
func (t *traces) transport(rt http.RoundTripper) http.RoundTripper {
	if t == nil || !t.on {
		return rt
	}
	return tracing.Transport(rt)
}

// store is the registry's store-call tracer; nil when tracing is off.
func (t *traces) store() idkeeper.Tracer {
	if t == nil || !t.on {
		return nil
	}
	return tracing.Store()
}

// close flushes the spans not yet exported (within 5 s).
func (t *traces) close() closeStep {
	return closeStep{"flush the traces", func() error {
		if t == nil {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return t.shutdown(ctx)
	}}
}
