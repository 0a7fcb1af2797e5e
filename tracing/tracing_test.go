package tracing_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/internal/harness/registrytest"
	"github.com/idkeeper/idkeeper/tracing"
)

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false},
		{map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false},
	} {
		env := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
		if got := tracing.Enabled(env); got != c.want {
			t.Errorf("%v: Enabled = %v", c.env, got)
		}
	}
	for _, env := range []map[string]string{
		{"OTEL_TRACES_EXPORTER": "zipkin"},
		{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
	} {
		if _, err := tracing.Setup(context.Background(), func(k string) (string, bool) { v, ok := env[k]; return v, ok }, "x", "v"); err == nil {
			t.Errorf("%v: Setup accepted it", env)
		}
	}
	shutdown, err := tracing.Setup(context.Background(), func(string) (string, bool) { return "", false }, "x", "v")
	if err != nil || shutdown(context.Background()) != nil {
		t.Errorf("Setup with tracing off: %v", err)
	}
}

// One trace runs from the application through the client library's Alloc, the
// registry's HTTP handler, to the registry's store call: each span a child of
// the one before, all in the application's trace.
func TestOneTraceClientServerStore(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracing.Install(tp)

	srv := registrytest.Start(t, registrytest.Options{
		Config: idkeeper.Config{Tracer: tracing.Store(), Nodes: 8},
		Wrap:   func(h http.Handler) http.Handler { return tracing.Handler(h, "idkeeper-server") },
	})
	sess, err := client.New(client.Config{ServerURL: srv.URL, APIKey: srv.APIKey, Count: 1,
		WrapTransport: tracing.Transport, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, app := otel.Tracer("app").Start(context.Background(), "start the service")
	openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sess.Open(openCtx); err != nil {
		t.Fatal(err)
	}
	app.End()
	defer sess.Close()

	spans := exp.GetSpans()
	find := func(pred func(tracetest.SpanStub) bool) tracetest.SpanStub {
		t.Helper()
		for _, s := range spans {
			if pred(s) {
				return s
			}
		}
		var names []string
		for _, s := range spans {
			names = append(names, s.Name)
		}
		t.Fatalf("no such span among %v", names)
		return tracetest.SpanStub{}
	}
	root := find(func(s tracetest.SpanStub) bool { return s.Name == "start the service" })
	cl := find(func(s tracetest.SpanStub) bool {
		return s.SpanKind == trace.SpanKindClient && s.Name == "idkeeper POST /v1/leases"
	})
	sv := find(func(s tracetest.SpanStub) bool {
		return s.SpanKind == trace.SpanKindServer && s.Name == "POST /v1/leases"
	})
	st := find(func(s tracetest.SpanStub) bool { return s.Name == "store.alloc" })
	tid := root.SpanContext.TraceID()
	for _, s := range []tracetest.SpanStub{cl, sv, st} {
		if s.SpanContext.TraceID() != tid {
			t.Errorf("span %q is in trace %s, the application's is %s", s.Name, s.SpanContext.TraceID(), tid)
		}
	}
	if cl.Parent.SpanID() != root.SpanContext.SpanID() || sv.Parent.SpanID() != cl.SpanContext.SpanID() ||
		st.Parent.SpanID() != sv.SpanContext.SpanID() {
		t.Errorf("parents: client's %s (app %s), server's %s (client %s), store's %s (server %s)",
			cl.Parent.SpanID(), root.SpanContext.SpanID(), sv.Parent.SpanID(), cl.SpanContext.SpanID(),
			st.Parent.SpanID(), sv.SpanContext.SpanID())
	}
	if !sv.Parent.IsRemote() {
		t.Error("the server span's parent is not remote: the trace context did not travel in the request")
	}
}
