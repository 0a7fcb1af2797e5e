package discord

import (
	"errors"
	"strings"
	"testing"
)

func TestValidWebhookURL(t *testing.T) {
	const tok = "AbC_-123xyzXYZ456789012"
	tests := []struct {
		name, url string
		want      string // substring of the error; "" means valid
	}{
		{"discord.com", "https://discord.com/api/webhooks/123456789012345678/" + tok, ""},
		{"discordapp.com", "https://discordapp.com/api/webhooks/1/" + tok, ""},
		{"canary", "https://canary.discord.com/api/webhooks/1/" + tok, ""},
		{"ptb", "https://ptb.discord.com/api/webhooks/1/" + tok, ""},
		{"ptb discordapp", "https://ptb.discordapp.com/api/webhooks/1/" + tok, ""},
		{"upper-case host", "https://Discord.com/api/webhooks/1/" + tok, ""},
		{"token 100 chars", "https://discord.com/api/webhooks/1/" + strings.Repeat("a", 100), ""},
		{"empty", "", "empty"},
		{"http", "http://discord.com/api/webhooks/1/" + tok, "https"},
		{"no scheme", "discord.com/api/webhooks/1/" + tok, "https"},
		{"userinfo", "https://user:pw@discord.com/api/webhooks/1/" + tok, "user info"},
		{"port", "https://discord.com:443/api/webhooks/1/" + tok, "port"},
		{"other host", "https://evil.example/api/webhooks/1/" + tok, "host"},
		{"lookalike host", "https://discord.com.evil.example/api/webhooks/1/" + tok, "host"},
		{"other subdomain", "https://www.discord.com/api/webhooks/1/" + tok, "host"},
		{"query", "https://discord.com/api/webhooks/1/" + tok + "?wait=true", "query"},
		{"empty query", "https://discord.com/api/webhooks/1/" + tok + "?", "query"},
		{"fragment", "https://discord.com/api/webhooks/1/" + tok + "#x", "fragment"},
		{"wrong path", "https://discord.com/api/v10/webhooks/1/" + tok, "path"},
		{"extra segment", "https://discord.com/api/webhooks/1/" + tok + "/slack", "path"},
		{"trailing slash", "https://discord.com/api/webhooks/1/" + tok + "/", "path"},
		{"no token", "https://discord.com/api/webhooks/1", "path"},
		{"empty token", "https://discord.com/api/webhooks/1/", "token is missing"},
		{"id not digits", "https://discord.com/api/webhooks/12a/" + tok, "id"},
		{"id empty", "https://discord.com/api/webhooks//" + tok, "id"},
		{"id too long", "https://discord.com/api/webhooks/" + strings.Repeat("1", 21) + "/" + tok, "id"},
		{"token too long", "https://discord.com/api/webhooks/1/" + strings.Repeat("a", 101), "longer"},
		{"token bad char", "https://discord.com/api/webhooks/1/abc.def", "token may contain"},
		{"token escaped", "https://discord.com/api/webhooks/1/abc%2Fdef", "token may contain"},
		{"does not parse", "https://discord.com/api/webhooks/1/%zz" + tok, "parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidWebhookURL(tt.url)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("ValidWebhookURL: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidWebhookURL(%q) = nil, want error containing %q", tt.url, tt.want)
			}
			if !errors.Is(err, ErrInvalidWebhookURL) {
				t.Errorf("error %v does not wrap ErrInvalidWebhookURL", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), tok) || strings.Contains(err.Error(), "abc") {
				t.Errorf("error %q echoes the token", err)
			}
		})
	}
}

func TestMask(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://discord.com/api/webhooks/123456/abcdefghijklmnopWXYZ", "https://discord.com/api/webhooks/123456/••••WXYZ"},
		{"https://Canary.Discord.com/api/webhooks/9/abcdefghijklmnopWXYZ", "https://canary.discord.com/api/webhooks/9/••••WXYZ"},
		{"https://discord.com/api/webhooks/123456/short", "https://discord.com/api/webhooks/123456/••••"},
		{"https://evil.example/api/webhooks/1/abcdefghijklmnopWXYZ", "(invalid webhook URL)"},
		{"not a url %zz secret", "(invalid webhook URL)"},
	}
	for _, tt := range tests {
		if got := Mask(tt.in); got != tt.want {
			t.Errorf("Mask(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
