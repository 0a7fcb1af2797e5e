package idkeeper

import "context"

// Tracer starts a span for one store call of the registry, named op
// ("store.alloc", "store.renew", "store.remove", "store.reclaim",
// "store.revoke", "store.counts", "store.api_key"), as a child of ctx's span:
// the call runs with the returned context, and end is called once with its
// error. The tracing package implements it with OpenTelemetry.
type Tracer func(ctx context.Context, op string) (_ context.Context, end func(error))

// trace starts a span of the store call op with Config.Tracer, or does nothing.
func (r *Registry) trace(ctx context.Context, op string) (context.Context, func(error)) {
	if r.cfg.Tracer == nil {
		return ctx, func(error) {}
	}
	return r.cfg.Tracer(ctx, op)
}
