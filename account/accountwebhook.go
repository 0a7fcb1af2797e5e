package account

import (
	"context"
	"net/url"
	"strings"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
)

// SetWebhook sets the Discord webhook URL that user's alerts go to (User.Webhook),
// or clears it when webhook is "", and returns the account without its password
// hash. Spaces around webhook are trimmed. Every enabled account may set its own,
// whatever its role; nobody sets another's. A URL must pass
// Config.ValidWebhook; without one, only clearing is possible. The
// account's sessions stay (Epoch is not changed). The change is audited as
// audit.UserWebhook with the URL masked, never its token; the same value is no
// change and no entry. Errors: INVALID_REQUEST naming "url" (over MaxWebhookLen
// bytes, refused by the validator, or no validator configured); SESSION_EXPIRED
// when the account is gone or disabled; FORBIDDEN for an OperatorActor, which has
// no account.
func (a *Service) SetWebhook(ctx context.Context, user User, webhook string) (User, error) {
	if user.IsOperator() {
		return User{}, protocol.Errorf(protocol.CodeForbidden, "a webhook belongs to an account: the operator of the store has none")
	}
	webhook = strings.TrimSpace(webhook)
	if webhook != "" {
		if err := a.checkWebhook(webhook); err != nil {
			return User{}, err
		}
	}
	detail := ""
	u, err := a.update(ctx, user.Name, func(u *User) error {
		detail = "" // a retry after a conflict reads again
		if u.Disabled {
			return errSessionExpired
		}
		if u.Webhook == webhook {
			return errUnchanged
		}
		u.Webhook = webhook
		if webhook == "" {
			detail = "cleared"
		} else {
			detail = "set " + maskWebhook(webhook)
		}
		return nil
	})
	if protocol.ErrorCode(err) == protocol.CodeNotFound {
		return User{}, errSessionExpired
	} else if err != nil {
		return User{}, err
	}
	if detail != "" {
		a.audit(ctx, audit.Entry{Actor: user.AuditActor(), Action: audit.UserWebhook, Target: "user:" + user.Name, Detail: detail})
	}
	u.PasswordHash = ""
	return u, nil
}

// checkWebhook returns nil when webhook may be stored, else an INVALID_REQUEST
// Error naming "url" whose cause is the validator's error.
func (a *Service) checkWebhook(webhook string) error {
	if len(webhook) > MaxWebhookLen {
		return protocol.Invalidf("url", "a webhook URL has at most %d bytes", MaxWebhookLen)
	}
	if a.cfg.ValidWebhook == nil {
		return protocol.Invalidf("url", "this server takes no webhook URL: alerts are not configured")
	}
	if err := a.cfg.ValidWebhook(webhook); err != nil {
		return &idkeeper.Error{Code: protocol.CodeInvalidRequest, Field: "url", Message: err.Error(), Err: err}
	}
	return nil
}

// maskWebhook is a webhook URL as the audit log names it: scheme, host and path,
// the last path segment (a Discord webhook's token) replaced by "••••" and, when it
// has 12 characters or more, its last four; no user info, port, query or
// fragment. For a Discord webhook URL it is what discord.Mask shows.
func maskWebhook(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(webhook URL)"
	}
	p := u.EscapedPath()
	dir, last := p, ""
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		dir, last = p[:i+1], p[i+1:]
	}
	masked := "••••"
	if len(last) >= 12 {
		masked += last[len(last)-4:]
	}
	return u.Scheme + "://" + strings.ToLower(u.Hostname()) + dir + masked
}
