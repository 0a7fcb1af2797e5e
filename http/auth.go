package http

import (
	"context"
	"net/http"

	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// authed wraps h in the checks of every authenticated route, in this order: the
// client's address against the allow-list (403 IP_NOT_ALLOWED), that the registry
// serves (503) and the X-API-Key (401); then it runs h under the request timeout.
// An answer to a request whose key expires within idkeeper.KeyExpiryNotice
// carries a Warning header saying so (wire.KeyExpiryWarning), errors included.
func (s *Server) authed(h apiFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip, err := clientIP(r, s.opts.TrustedProxies)
		remote := ip.String()
		if err != nil {
			remote = r.RemoteAddr
		}
		if info := infoFrom(r.Context()); info != nil {
			info.remoteIP = remote
		}
		if al := s.opts.AllowList; err != nil && !al.AllowsAll() || err == nil && !al.Allows(ip) {
			switch {
			case err != nil:
				s.log.Warn("cannot tell the client's address", "err", err)
			case !al.Loaded():
				s.writeProblem(w, r, protocol.Errorf(protocol.CodeStoreUnavailable, "the IP allow-list has not been read from the store yet"))
				return
			}
			s.writeProblem(w, r, protocol.Errorf(protocol.CodeIPNotAllowed, "requests from %s are not allowed", remote))
			return
		}
		if err := s.reg.Serving(); err != nil {
			s.writeProblem(w, r, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.Timeout)
		defer cancel()
		r = r.WithContext(ctx)
		key, err := s.reg.Authenticate(ctx, r.Header.Get(APIKeyHeader))
		if err != nil {
			s.writeProblem(w, r, err)
			return
		}
		if info := infoFrom(ctx); info != nil {
			info.keyID = key.ID
		}
		if at, soon := s.reg.KeyNotice(key); soon {
			w.Header().Add(wire.WarningHeader, wire.KeyExpiryWarning(key.ID, at))
		}
		body, err := h(w, r, caller{remoteIP: remote, key: key})
		if err != nil {
			s.writeProblem(w, r, err)
			return
		}
		s.writeJSON(w, body)
	})
}
