package http

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/idkeeper/idkeeper/internal/clientip"
)

// clientIP returns the address a request came from (clientip.Of): the TCP peer,
// or, from a trusted proxy, the first address of X-Forwarded-For, read from the
// right, that is not a trusted proxy.
func clientIP(r *http.Request, trusted []netip.Prefix) (netip.Addr, error) {
	return clientip.Of(r, trusted)
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
		p, err := clientip.ParsePrefix(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
