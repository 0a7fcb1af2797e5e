package admin

import (
	"context"
	"errors"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/discord"
	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// The caller's own Discord webhook (issue #11): set, remove, and a test message
// through Config.Discord. Accounts checks and audits the changes; a webhook URL
// carries a secret token, so every answer, page and log shows it only masked
// (discord.Mask).

// Error codes of the webhook routes, sent as the `code` member of problem+json;
// their status and title are registered with internal/problem below.
const (
	// CodeAlertsNotConfigured (409): the server has no Discord sender
	// (Config.Discord), so it sends no test message.
	CodeAlertsNotConfigured idkeeper.Code = "ALERTS_NOT_CONFIGURED"
	// CodeWebhookNotSet (409): the caller has no webhook to send a test message to.
	CodeWebhookNotSet idkeeper.Code = "WEBHOOK_NOT_SET"
	// CodeWebhookTestRateLimited (429, Retry-After): the caller sent a test
	// message less than WebhookTestInterval ago. Details "retryAfterSeconds".
	CodeWebhookTestRateLimited idkeeper.Code = "WEBHOOK_TEST_RATE_LIMITED"
	// CodeWebhookTestFailed (502): Discord did not take the test message. Details
	// "discord": its answer (webhookTestJSON).
	CodeWebhookTestFailed idkeeper.Code = "WEBHOOK_TEST_FAILED"
)

func init() {
	problem.Register(map[idkeeper.Code]problem.Entry{
		CodeAlertsNotConfigured:    {Status: http.StatusConflict, Title: "Alerts not configured"},
		CodeWebhookNotSet:          {Status: http.StatusConflict, Title: "No webhook set"},
		CodeWebhookTestRateLimited: {Status: http.StatusTooManyRequests, Title: "Too many test messages"},
		CodeWebhookTestFailed:      {Status: http.StatusBadGateway, Title: "Test message not delivered"},
	})
}

// WebhookTestInterval is the least time between two test messages of one user,
// counted by each replica: the button must not be a way to spam a channel.
const WebhookTestInterval = 10 * time.Second

// webhookJSON is the body of POST /admin/api/me/webhook's answer, and the member
// of GET /admin/api/me: the webhook masked, null for none.
type webhookJSON struct {
	Webhook *string `json:"webhook"`
}

// webhookTestJSON is Discord's answer to a test message: the HTTP status of its
// last answer (0: none came), that answer's body (cut, token redacted), the
// requests made, and why it failed ("" when delivered).
type webhookTestJSON struct {
	Status   int    `json:"status"`
	Body     string `json:"body"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error,omitempty"`
}

// webhookTestAnswer is the 200 body of POST /admin/api/me/webhook/test.
type webhookTestAnswer struct {
	Delivered bool            `json:"delivered"`
	Discord   webhookTestJSON `json:"discord"`
}

// maskedWebhook is u's webhook as it may be shown (discord.Mask), nil for none.
func maskedWebhook(u account.User) *string {
	if u.Webhook == "" {
		return nil
	}
	m := discord.Mask(u.Webhook)
	return &m
}

var setWebhookMembers = []string{"url"}

// setWebhook sets the caller's webhook: {"url": "https://discord.com/api/webhooks/…"};
// "" removes it.
func (h *Handler) setWebhook(w http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	m, err := h.body(w, r, setWebhookMembers)
	if err != nil {
		return nil, err
	}
	if _, ok := m["url"]; !ok {
		return nil, protocol.Invalidf("url", `give "url": the Discord webhook URL, or "" to remove yours`)
	}
	url, err := m.String("", "url")
	if err != nil {
		return nil, err
	}
	u, err := h.acct.SetWebhook(r.Context(), *p.user, url)
	if err != nil {
		return nil, err
	}
	return webhookJSON{Webhook: maskedWebhook(u)}, nil
}

// removeWebhook removes the caller's webhook; none is no error.
func (h *Handler) removeWebhook(_ http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	if _, err := h.acct.SetWebhook(r.Context(), *p.user, ""); err != nil {
		return nil, err
	}
	return noContent{}, nil
}

// testWebhook posts a short test message to the caller's webhook, within the
// request's Timeout (retries included), and answers Discord's answer: 200 when it
// took the message, 502 WEBHOOK_TEST_FAILED (with the answer as the member
// "discord") when not. At most one per WebhookTestInterval per user, sent or not.
// Each test is audited (audit.WebhookTest).
func (h *Handler) testWebhook(_ http.ResponseWriter, r *http.Request, p *principal) (any, error) {
	if h.cfg.Discord == nil {
		return nil, protocol.Errorf(CodeAlertsNotConfigured, "alerts are not configured on this server: it sends no Discord message")
	}
	u := *p.user // as the session's check read it from the store
	if u.Webhook == "" {
		return nil, protocol.Errorf(CodeWebhookNotSet, "you have no Discord webhook: set one first")
	}
	if wait := h.webhookTests.take(u.Name, h.acct.Config().Clock()); wait > 0 {
		e := protocol.Errorf(CodeWebhookTestRateLimited, "one test message per %s: retry in %s", WebhookTestInterval,
			wait.Round(time.Second))
		e.Details = map[string]any{"retryAfterSeconds": int(math.Ceil(wait.Seconds()))}
		return nil, e
	}
	res, err := h.cfg.Discord.Send(r.Context(), u.Webhook, discord.Message{Content: testMessage(u.Name, h.acct.Config().Clock())})
	out := webhookTestJSON{Status: res.Status, Body: res.Body, Attempts: res.Attempts}
	outcome := "delivered"
	if err != nil {
		out.Error = err.Error() // discord's errors never hold the token
		outcome = "failed: " + out.Error
	}
	// Recorded even when the send used up the request's time.
	actx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.Timeout)
	defer cancel()
	h.audit(actx, audit.Entry{Actor: p.actor, Action: audit.WebhookTest, Target: "user:" + u.Name,
		Detail: "test message to " + discord.Mask(u.Webhook) + ": " + outcome})
	if err != nil {
		return nil, &idkeeper.Error{Code: CodeWebhookTestFailed, Message: "Discord did not take the test message: " + out.Error,
			Details: map[string]any{"discord": out}, Err: err}
	}
	return webhookTestAnswer{Delivered: true, Discord: out}, nil
}

// testMessage is the content of a test message.
func testMessage(user string, now time.Time) string {
	return "IdKeeper test message: the registry's alerts for the user " + user + " reach this channel. Sent from the admin web at " +
		now.UTC().Format(wire.TimeFormat) + "."
}

// testLimiter spaces each user's test messages WebhookTestInterval apart.
type testLimiter struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// take records a test of user at now and returns 0, or, when the user's last one
// is less than WebhookTestInterval before now, how long to wait (and records
// nothing).
func (l *testLimiter) take(user string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[string]time.Time{}
	}
	if at, ok := l.last[user]; ok {
		if wait := at.Add(WebhookTestInterval).Sub(now); wait > 0 {
			return wait
		}
	}
	for name, at := range l.last {
		if now.Sub(at) >= WebhookTestInterval {
			delete(l.last, name)
		}
	}
	l.last[user] = now
	return 0
}

// webhookTestOf returns Discord's answer carried by an error of testWebhook.
func webhookTestOf(err error) (webhookTestJSON, bool) {
	var e *idkeeper.Error
	if !errors.As(err, &e) {
		return webhookTestJSON{}, false
	}
	t, ok := e.Details["discord"].(webhookTestJSON)
	return t, ok
}
