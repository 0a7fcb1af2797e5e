package main

import (
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	idkclient "github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/gateway"
	"github.com/idkeeper/idkeeper/server"
)

// The gateway's default listen addresses. Without consumer keys anyone who reaches
// the gateway gets IDs, so it listens on loopback unless told otherwise.
const (
	GatewayLoopbackListen = "127.0.0.1:8081"
	GatewayOpenListen     = ":8081"
)

// defaultGatewayListen is --listen's value when neither the flag nor
// IDKEEPER_LISTEN gives one: GatewayOpenListen with consumer keys,
// GatewayLoopbackListen without.
func defaultGatewayListen(keys *gateway.ConsumerKeys) string {
	if keys.Len() > 0 {
		return GatewayOpenListen
	}
	return GatewayLoopbackListen
}

// warnOpenGateway logs a warning when a gateway without consumer keys listens on
// more than loopback: every client that reaches the address can take IDs.
func warnOpenGateway(log *slog.Logger, listen string, keys *gateway.ConsumerKeys) {
	if keys.Len() > 0 || loopbackOnly(listen) {
		return
	}
	log.Warn("the gateway has no consumer keys and listens beyond loopback: anyone who reaches "+listen+" can take IDs; "+
		"set "+ConsumerKeysEnv+" or --consumer-keys-file, or listen on 127.0.0.1", "listen", listen)
}

// loopbackOnly reports whether a listen address (host:port) accepts connections
// from this host only: a loopback IP or "localhost". An empty host, a wildcard, any
// other address or a host name is wider.
func loopbackOnly(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// checkServerURLs checks the gateway's --server list: 1..MaxServerURLs distinct
// http(s) URLs.
func checkServerURLs(urls []string) error {
	switch {
	case len(urls) == 0:
		return usagef("--server is required: the registry's base URL, e.g. http://idkeeper:8080 (several replicas: repeat it, or separate them with commas)")
	case len(urls) > idkclient.MaxServerURLs:
		return usagef("--server names %d URLs: at most %d", len(urls), idkclient.MaxServerURLs)
	}
	seen := make([]string, 0, len(urls))
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usagef("--server %q: want an http:// or https:// URL", server.RedactURL(raw))
		}
		base := strings.TrimRight(raw, "/")
		if slices.Contains(seen, base) {
			return usagef("--server names %q twice", server.RedactURL(raw))
		}
		seen = append(seen, base)
	}
	return nil
}

// servers is the registry's URLs for logs, passwords redacted.
func (c gatewayConfig) servers() string {
	urls := c.ServerURLs
	if c.ServerURL != "" {
		urls = []string{c.ServerURL}
	}
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = server.RedactURL(u)
	}
	return strings.Join(out, ",")
}
