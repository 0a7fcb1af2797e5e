package main

import (
	"log/slog"
	"net"
	"net/netip"
)

// logAttr is the ReplaceAttr of every logger the commands build (logFlags.logger),
// so that the text and JSON formats write values alike:
//
//   - a time.Duration as its Go string, "1.5s" or "250ms", instead of the JSON
//     handler's integer nanoseconds;
//   - a net.Addr (a listener's or a peer's address) as its host:port string, and a
//     netip.AddrPort likewise, instead of the JSON handler's {} or an object.
//
// Addresses of clients are logged as remoteIp, the bare IP (behind a proxy the
// port says nothing); addresses that serve or are dialled as host:port strings.
func logAttr(_ []string, a slog.Attr) slog.Attr {
	switch v := a.Value; v.Kind() {
	case slog.KindDuration:
		a.Value = slog.StringValue(v.Duration().String())
	case slog.KindAny:
		switch x := v.Any().(type) {
		case net.Addr:
			a.Value = slog.StringValue(x.String())
		case netip.AddrPort:
			a.Value = slog.StringValue(x.String())
		case netip.Addr:
			a.Value = slog.StringValue(x.String())
		}
	}
	return a
}
