// Package tracing wires OpenTelemetry tracing into IdKeeper (issue #14): the
// HTTP APIs (registry, admin, gateway), the registry's store calls, and the
// client library's calls (Transport, plugged in with client.Config.WrapTransport),
// whose trace context the registry continues.
//
// Tracing is off unless the standard OpenTelemetry environment variables ask
// for it: OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and not
// OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none. The exporter is OTLP
// over HTTP/protobuf, or gRPC with OTEL_EXPORTER_OTLP_PROTOCOL=grpc (or
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL); its endpoint, headers, TLS and timeout
// come from the OTEL_EXPORTER_OTLP_* variables, read by the exporter itself; the
// sampler from OTEL_TRACES_SAMPLER[_ARG] (default parentbased_always_on); the
// service name from OTEL_SERVICE_NAME, else the caller's; resource attributes
// from OTEL_RESOURCE_ATTRIBUTES. Trace context travels in W3C traceparent and
// baggage headers.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idkeeper/idkeeper"
)

// ScopeName is the instrumentation scope of IdKeeper's own spans.
const ScopeName = "github.com/idkeeper/idkeeper"

// Env reads an environment variable (os.LookupEnv).
type Env func(string) (string, bool)

// Enabled reports whether env asks for traces (see the package comment).
func Enabled(env Env) bool {
	get := func(k string) string { v, _ := env(k); return strings.TrimSpace(v) }
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch exp := strings.ToLower(get("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false
	case "":
		return get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return true
	}
}

// Setup installs, when env asks for traces, a tracer provider exporting over
// OTLP as the global one, with W3C trace context and baggage propagation, and
// returns its shutdown (which flushes the spans); otherwise it changes nothing
// and returns a no-op. service names the process (OTEL_SERVICE_NAME wins).
// Errors: an OTEL_TRACES_EXPORTER other than otlp or none, an
// OTEL_EXPORTER_OTLP_PROTOCOL other than http/protobuf or grpc, or an exporter
// that cannot be made.
func Setup(ctx context.Context, env Env, service, version string) (shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if !Enabled(env) {
		return noop, nil
	}
	get := func(k string) string { v, _ := env(k); return strings.TrimSpace(v) }
	if exp := strings.ToLower(get("OTEL_TRACES_EXPORTER")); exp != "" && exp != "otlp" {
		return noop, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%q: this build exports over otlp only (or none)", exp)
	}
	protocol := get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp sdktrace.SpanExporter
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return noop, fmt.Errorf("tracing: OTLP protocol %q: want http/protobuf or grpc", protocol)
	}
	if err != nil {
		return noop, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(service), semconv.ServiceVersion(version)))
	if err != nil {
		return noop, fmt.Errorf("tracing: resource: %w", err)
	}
	// resource.Default reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES from
	// the process environment; an explicit OTEL_SERVICE_NAME wins over service.
	if name := get("OTEL_SERVICE_NAME"); name != "" {
		res, _ = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(name)))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Install(tp)
	return tp.Shutdown, nil
}

// Install makes tp the global tracer provider, with W3C trace context and
// baggage propagation. Tests install one with an in-memory exporter.
func Install(tp trace.TracerProvider) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
}

// Handler traces every request to h as a server span named by its route
// ("POST /v1/leases"), continuing the caller's trace; operation names the
// service in the span's attributes.
func Handler(h http.Handler, operation string) http.Handler {
	return otelhttp.NewHandler(h, operation, otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		if r.Pattern != "" {
			return r.Pattern
		}
		return r.Method + " " + r.URL.Path
	}))
}

// Transport traces every request sent through rt as a client span named
// "idkeeper <method> <path>" ("idkeeper POST /v1/leases") and sends its context
// in the W3C traceparent header (the global tracer provider and propagator: see
// Install). It is the client library's hook, client.Config.WrapTransport, for an
// embedder that traces: the library imports no OpenTelemetry itself.
func Transport(rt http.RoundTripper) http.RoundTripper {
	return otelhttp.NewTransport(rt, otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		return "idkeeper " + r.Method + " " + r.URL.Path
	}))
}

// Store returns the registry's Tracer: a span per store call, a child of the
// request's, named by the call ("store.alloc"). ErrNotFound is an answer, not
// an error, on the span.
func Store() idkeeper.Tracer {
	tr := otel.Tracer(ScopeName)
	return func(ctx context.Context, op string) (context.Context, func(error)) {
		ctx, span := tr.Start(ctx, op, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("idkeeper.store.op", strings.TrimPrefix(op, "store."))))
		return ctx, func(err error) {
			if err != nil && !errors.Is(err, idkeeper.ErrNotFound) {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}
	}
}
