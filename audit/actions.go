package audit

import (
	"context"
	"time"
)

// Store keeps the audit log; the admin web's store (account.Store) includes it.
// Every method is atomic and safe for concurrent use by several processes sharing
// the store. Errors: idkeeper.ErrConflict as stated, any other error for a failing
// store.
type Store interface {
	// AppendAudit appends e when it extends the log: e.Seq is the last entry's Seq
	// + 1 and e.Prev its Hash (Seq 1 and Prev "" on an empty log, or after the last
	// entry was pruned: the log remembers the last Seq and Hash it ever held). It
	// returns ErrConflict, and writes nothing, when another entry came first: read
	// the head again. The store keeps e as given; Entry.Seal computes Hash.
	AppendAudit(ctx context.Context, e Entry) error
	// AuditHead returns the Seq and Hash of the last entry ever appended (0 and ""
	// for a log that never had one), pruned or not.
	AuditHead(ctx context.Context) (seq uint64, hash string, err error)
	// AuditEntries returns up to limit entries from Seq from (inclusive) upwards in
	// Seq order, pruned ones left out; limit is 1..1000.
	AuditEntries(ctx context.Context, from uint64, limit int) ([]Entry, error)
	// AuditEntriesBefore returns up to limit entries with Seq below before, newest
	// first; before 0 means from the newest; limit is 1..1000.
	AuditEntriesBefore(ctx context.Context, before uint64, limit int) ([]Entry, error)
	// PruneAudit deletes entries from the oldest upwards, in Seq order, while their
	// At is before before, stopping at the first that is not (so what stays is one
	// unbroken run up to the head, even after a clock stepped back) or after limit
	// of them (1..10000), and returns how many. The head is remembered (AuditHead)
	// even when its entry is deleted.
	PruneAudit(ctx context.Context, before time.Time, limit int) (int, error)
}

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
