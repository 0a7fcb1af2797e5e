package audit

import (
	"context"
)

// Bounds of an entry's text, in bytes: longer text is cut when sealed.
const (
	MaxTextLen  = 1024 // Entry.Detail
	MaxFieldLen = 256  // Entry.Target, Actor, Action and RemoteIP
)

// Audit actions.
const (
	Login          = "user.login"
	LoginFailed    = "user.login_failed"
	Logout         = "user.logout"
	UserCreate     = "user.create"
	UserUpdate     = "user.update" // role, disabled
	PasswordChange = "user.password"
	UserWebhook    = "user.webhook"      // a user set or cleared their Discord webhook; Detail names it masked
	WebhookTest    = "user.webhook_test" // a user sent a test message to their webhook (admin web); Detail: masked URL, outcome
	KeyCreate      = "apikey.create"
	KeyUpdate      = "apikey.update"
	KeyRevoke      = "apikey.revoke"
	AllowAdd       = "allowlist.add"
	AllowRemove    = "allowlist.remove"
	LeaseGrant     = "lease.grant"
	LeaseRemove    = "lease.remove"
	LeaseReclaim   = "lease.reclaim"
	LeaseRevoke    = "lease.revoke"
	LeaseRestore   = "lease.restore"
	SkewReject     = "skew.reject"
	// BackupRestore: the store's whole state replaced by a backup through the
	// admin API (POST /admin/api/restore).
	BackupRestore = "backup.restore"
)

// Actions of alert deliveries (one entry per webhook per alert message), of the
// backup schedule (Detail names the old and the new spec) and of a replica that
// failed closed on its clock check.
const (
	AlertSent       = "alert.sent"
	AlertFailed     = "alert.failed"
	BackupSchedule  = "backup.schedule"
	ClockUnverified = "clock.unverified"
)

type actorKey struct{}

// WithActor returns ctx carrying who acts, as the audit log names them: "user:NAME"
// for an admin web user, "key:ID" for an API key. Registry.RevokeLease records
// the actor of its ctx (and the address of WithRemoteIP); without one, "system".
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorFrom returns the actor WithActor put in ctx, or "".
func ActorFrom(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}

type remoteIPKey struct{}

// WithRemoteIP returns ctx carrying the address of the request's client, which
// the audit log records in entries that name none.
func WithRemoteIP(ctx context.Context, ip string) context.Context {
	return context.WithValue(ctx, remoteIPKey{}, ip)
}

// RemoteIPFrom returns the address WithRemoteIP put in ctx, or "".
func RemoteIPFrom(ctx context.Context) string {
	ip, _ := ctx.Value(remoteIPKey{}).(string)
	return ip
}
