package http

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// clientIP returns the address a request came from: the TCP peer (r.RemoteAddr),
// unless the peer is one of trusted, in which case X-Forwarded-For is walked from the
// right and the first address that is not a trusted proxy is the client. An
// X-Forwarded-For from an untrusted peer is ignored: anyone can send one.
func clientIP(r *http.Request, trusted []netip.Prefix) (netip.Addr, error) {
	peer, err := parseHostAddr(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("peer address %q: %w", r.RemoteAddr, err)
	}
	if !inPrefixes(trusted, peer) {
		return peer, nil
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop := strings.TrimSpace(hops[i])
		if hop == "" {
			continue
		}
		a, err := parseHostAddr(hop)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("X-Forwarded-For entry %q from trusted proxy %s: %w", hop, peer, err)
		}
		if !inPrefixes(trusted, a) {
			return a, nil
		}
		peer = a
	}
	return peer, nil
}

// parseHostAddr parses "ip", "ip:port" or "[ip]:port", mapping IPv4-in-IPv6 to IPv4
// and dropping any zone, so allow-list prefixes match either form.
func parseHostAddr(s string) (netip.Addr, error) {
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(s); err == nil {
		a = ap.Addr()
	} else if a, err = netip.ParseAddr(s); err != nil {
		return netip.Addr{}, err
	}
	return a.Unmap().WithZone(""), nil
}

func inPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParsePrefixes parses a comma-separated list of CIDR prefixes and bare addresses (a
// bare address is a /32 or /128), as the --allowed-ips and --trusted-proxies flags
// take them. Empty entries are skipped.
func ParsePrefixes(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if strings.Contains(s, "/") {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("%q is not a CIDR prefix such as 10.0.0.0/8 or fd00::/8", s)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address or CIDR prefix", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
