package httpserve

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/tracing"
)

// Traces is a process's OpenTelemetry tracing (package tracing): on only when
// the standard OTEL_* environment asks for it. A nil *Traces is off.
type Traces struct {
	on       bool
	shutdown func(context.Context) error
}

// StartTracing installs the tracer provider the environment env asks for, if
// any, and logs it. Its error is an OTEL_* setting it cannot honour: a mistake
// in the configuration, which stops the start.
func StartTracing(env func(string) (string, bool), service, version string, log *slog.Logger) (*Traces, error) {
	shutdown, err := tracing.Setup(context.Background(), tracing.Env(env), service, version)
	if err != nil {
		return nil, err
	}
	t := &Traces{on: tracing.Enabled(tracing.Env(env)), shutdown: shutdown}
	if t.on {
		log.Info("OpenTelemetry tracing on (OTEL_* environment)", "service", service)
	}
	return t, nil
}

// Handler traces h's requests when tracing is on; h itself otherwise, so that
// tracing costs nothing when off.
func (t *Traces) Handler(h http.Handler, name string) http.Handler {
	if t == nil || !t.on {
		return h
	}
	return tracing.Handler(h, name)
}

// Transport traces the client library's requests through rt when tracing is on
// (client.Config.WrapTransport); rt itself otherwise.
func (t *Traces) Transport(rt http.RoundTripper) http.RoundTripper {
	if t == nil || !t.on {
		return rt
	}
	return tracing.Transport(rt)
}

// Store is the registry's store-call tracer; nil when tracing is off.
func (t *Traces) Store() idkeeper.Tracer {
	if t == nil || !t.on {
		return nil
	}
	return tracing.Store()
}

// Close is the shutdown step that flushes the spans not yet exported (within 5 s).
func (t *Traces) Close() Step {
	return Step{"flush the traces", func() error {
		if t == nil {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return t.shutdown(ctx)
	}}
}
