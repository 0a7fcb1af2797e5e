package http

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
)

// reqInfo collects what the access log tells about one request; handlers fill it.
type reqInfo struct {
	remoteIP string
	keyID    string // the public ID of the API key, never the key
	code     string // the problem code, for failures
}

type infoKey struct{}

func infoFrom(ctx context.Context) *reqInfo {
	info, _ := ctx.Value(infoKey{}).(*reqInfo)
	return info
}

// accessLog logs every request at debug level: method, path, status, problem code,
// size, duration, client address and API key ID. Headers are never logged, so the
// API key is not either.
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.log.Enabled(r.Context(), slog.LevelDebug) {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		info := &reqInfo{remoteIP: r.RemoteAddr}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), infoKey{}, info)))
		attrs := []slog.Attr{
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", sw.status),
			slog.Int64("bytes", sw.bytes),
			slog.Duration("elapsed", time.Since(start)),
			slog.String("remoteIp", info.remoteIP),
		}
		if info.keyID != "" {
			attrs = append(attrs, slog.String("keyId", info.keyID))
		}
		if info.code != "" {
			attrs = append(attrs, slog.String("code", info.code))
		}
		s.log.LogAttrs(r.Context(), slog.LevelDebug, "http request", attrs...)
	})
}

// statusWriter records the status and size of a response.
type statusWriter struct {
	http.ResponseWriter
	status      int
	bytes       int64
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// route serves r with mux and turns the mux's own 404 and 405 answers into
// problem+json; the 405 keeps the Allow header the mux sets. With
// Options.Metrics it counts every answer of status 400 or above by the name of
// its route pattern (routes; routeOther when none matched) and its problem code.
func (s *Server) route(mux *http.ServeMux, routes map[string]string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		m := s.opts.Metrics
		var rw *rejectWriter
		if m != nil {
			rw = rejectWriters.Get().(*rejectWriter)
			rw.ResponseWriter = w
			w = rw
		}
		if pattern != "" {
			mux.ServeHTTP(w, r)
		} else {
			h.ServeHTTP(&problemWriter{ResponseWriter: w, s: s, r: r}, r)
		}
		if rw == nil {
			return
		}
		if rw.status >= 400 {
			route, ok := routes[pattern]
			if !ok {
				route = routeOther
			}
			m.rejected(route, rw.code(), rw.status)
		}
		*rw = rejectWriter{}
		rejectWriters.Put(rw)
	})
}

// problemWriter replaces a plain-text 404 or 405 written through it by the problem
// body and drops the text; any other status passes through.
type problemWriter struct {
	http.ResponseWriter
	s        *Server
	r        *http.Request
	replaced bool
}

func (w *problemWriter) WriteHeader(code int) {
	var err error
	switch code {
	case http.StatusNotFound:
		err = protocol.Errorf(protocol.CodeNotFound, "no route for %s %s", w.r.Method, w.r.URL.Path)
	case http.StatusMethodNotAllowed:
		err = protocol.Errorf(protocol.CodeMethodNotAllowed, "%s is not allowed on %s; allowed: %s",
			w.r.Method, w.r.URL.Path, w.Header().Get("Allow"))
	default:
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.replaced = true
	w.s.writeProblem(w.ResponseWriter, w.r, err)
}

func (w *problemWriter) Write(b []byte) (int, error) {
	if w.replaced {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}
