// Package clientip tells which address an HTTP request came from, believing
// X-Forwarded-For only from trusted proxies, and parses the address prefixes that
// allow-lists and proxy lists are made of. The registry API (package http) and
// the admin API (package admin) use it, so both judge a client by one rule.
// Standard library only.
package clientip

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// Of returns the address a request came from: the TCP peer (r.RemoteAddr),
// unless the peer is one of trusted, in which case X-Forwarded-For is walked from
// the right and the first address that is not a trusted proxy is the client. An
// X-Forwarded-For from an untrusted peer is ignored: anyone can send one.
func Of(r *http.Request, trusted []netip.Prefix) (netip.Addr, error) {
	peer, err := ParseHostAddr(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("peer address %q: %w", r.RemoteAddr, err)
	}
	if !in(trusted, peer) {
		return peer, nil
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop := strings.TrimSpace(hops[i])
		if hop == "" {
			continue
		}
		a, err := ParseHostAddr(hop)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("X-Forwarded-For entry %q from trusted proxy %s: %w", hop, peer, err)
		}
		if !in(trusted, a) {
			return a, nil
		}
		peer = a
	}
	return peer, nil
}

// ParseHostAddr parses "ip", "ip:port" or "[ip]:port", mapping IPv4-in-IPv6 to
// IPv4 and dropping any zone, so allow-list prefixes match either form.
func ParseHostAddr(s string) (netip.Addr, error) {
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(s); err == nil {
		a = ap.Addr()
	} else if a, err = netip.ParseAddr(s); err != nil {
		return netip.Addr{}, err
	}
	return a.Unmap().WithZone(""), nil
}

func in(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParsePrefix parses a CIDR prefix, returned masked ("10.1.2.3/8" is 10.0.0.0/8),
// or a bare address, which is a /32 or /128 (an IPv4-in-IPv6 address is IPv4).
// The error says what was expected, quoting s.
func ParsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR prefix such as 10.0.0.0/8 or fd00::/8", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR prefix", s)
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), nil
}
