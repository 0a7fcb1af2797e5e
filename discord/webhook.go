// Package discord posts messages to Discord webhooks.
//
// It is the delivery adapter for Discord: ValidWebhookURL decides which URLs
// may be stored, Mask renders one for display, Message.Fit enforces Discord's
// size limits, and Client.Send / Client.Fanout deliver with retries that honour
// Discord's rate limits. Standard library only.
//
// A webhook URL carries a secret token: anyone holding it can post to the
// channel. Nothing in this package logs the token or puts it in an error, a
// Result or an Observer reason.
package discord

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ErrInvalidWebhookURL is wrapped by every error ValidWebhookURL returns.
var ErrInvalidWebhookURL = errors.New("discord: invalid webhook URL")

// webhookHosts are the hosts a webhook URL may name.
var webhookHosts = map[string]bool{
	"discord.com":           true,
	"canary.discord.com":    true,
	"ptb.discord.com":       true,
	"discordapp.com":        true,
	"canary.discordapp.com": true,
	"ptb.discordapp.com":    true,
}

const (
	webhookPathPrefix = "/api/webhooks/"
	maxIDDigits       = 20  // a snowflake fits in 20 decimal digits
	maxTokenLen       = 100 // Discord's tokens are 68 characters today
)

// ValidWebhookURL reports whether s is a Discord webhook URL of the form
// https://discord.com/api/webhooks/{id}/{token}, where the host may also be
// discordapp.com or a canary./ptb. subdomain of either, id is 1–20 decimal
// digits and token is 1–100 characters of [A-Za-z0-9_-]. User info, a port, a
// query, a fragment or any extra path segment is rejected.
//
// The error wraps ErrInvalidWebhookURL and names what is wrong; it never
// contains the token (nor, when the URL does not parse, any of s).
func ValidWebhookURL(s string) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidWebhookURL, fmt.Sprintf(format, a...))
	}
	if s == "" {
		return bad("empty")
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad("does not parse as a URL")
	}
	if u.Scheme != "https" {
		return bad("scheme must be https")
	}
	if u.Opaque != "" {
		return bad("must be of the form https://discord.com/api/webhooks/{id}/{token}")
	}
	if u.User != nil {
		return bad("must not contain user info")
	}
	if u.Port() != "" || strings.HasSuffix(u.Host, ":") {
		return bad("must not contain a port")
	}
	host := strings.ToLower(u.Hostname())
	if !webhookHosts[host] {
		return bad("host %q is not discord.com or discordapp.com", host)
	}
	if u.RawQuery != "" || u.ForceQuery {
		return bad("must not have a query")
	}
	if u.Fragment != "" || strings.Contains(s, "#") {
		return bad("must not have a fragment")
	}
	p := u.EscapedPath()
	if !strings.HasPrefix(p, webhookPathPrefix) {
		return bad("path must start with %s", webhookPathPrefix)
	}
	parts := strings.Split(strings.TrimPrefix(p, webhookPathPrefix), "/")
	if len(parts) != 2 {
		return bad("path must be %s{id}/{token}", webhookPathPrefix)
	}
	id, token := parts[0], parts[1]
	if id == "" || len(id) > maxIDDigits || !allDigits(id) {
		return bad("webhook id must be 1 to %d digits", maxIDDigits)
	}
	if token == "" {
		return bad("token is missing")
	}
	if len(token) > maxTokenLen {
		return bad("token is longer than %d characters", maxTokenLen)
	}
	if !validToken(token) {
		return bad("token may contain only letters, digits, '_' and '-'")
	}
	return nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func validToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// splitWebhook returns the id and token of a URL whose path contains
// /webhooks/{id}/{token}, and ok=false when it has no such segments. It does
// not validate; Send uses it for the id it reports and the token it redacts.
func splitWebhook(raw string) (u *url.URL, id, token string, ok bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", "", false
	}
	segs := strings.Split(strings.Trim(u.EscapedPath(), "/"), "/")
	for i := 0; i+2 < len(segs); i++ {
		if segs[i] == "webhooks" {
			return u, segs[i+1], segs[i+2], segs[i+1] != "" && segs[i+2] != ""
		}
	}
	return u, "", "", false
}

// Mask renders a webhook URL for display: the host and id stay, the token is
// replaced by "••••" followed by its last four characters (or by "••••" alone
// when the token is shorter than 12 characters), e.g.
// "https://discord.com/api/webhooks/123456/••••abcd". A string that is not a
// valid webhook URL is rendered as "(invalid webhook URL)", so nothing secret
// in it can leak.
func Mask(s string) string {
	if ValidWebhookURL(s) != nil {
		return "(invalid webhook URL)"
	}
	u, id, token, _ := splitWebhook(s)
	return "https://" + strings.ToLower(u.Hostname()) + webhookPathPrefix + id + "/" + maskToken(token)
}

func maskToken(token string) string {
	if len(token) < 12 {
		return "••••"
	}
	return "••••" + token[len(token)-4:]
}
