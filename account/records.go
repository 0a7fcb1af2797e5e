package account

import (
	"context"
	"time"

	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/audit"
)

// The records of the admin web (issue #10): accounts and their server-side
// sessions here, the IP allow-list kept in the store (package allowlist) and the
// audit log (package audit) beside them. A Store keeps them all; bolt, redis and
// etcd implement it, internal/harness/storetest.RunAdmin is its contract suite.

// Role is what an account may do. Each role may do everything the roles below it
// may: RoleAdmin > RoleOperator > RoleViewer.
type Role string

// The roles.
const (
	RoleViewer   Role = "viewer"   // reads every page; changes nothing
	RoleOperator Role = "operator" // also manages API keys, the allow-list, leases and backups
	RoleAdmin    Role = "admin"    // also manages accounts
)

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool { return r.rank() > 0 }

// AtLeast reports whether r may do what min may: a valid role whose rank is at
// least min's. An invalid role is at least nothing.
func (r Role) AtLeast(min Role) bool { return r.Valid() && r.rank() >= min.rank() }

func (r Role) rank() int {
	switch r {
	case RoleViewer:
		return 1
	case RoleOperator:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// Bounds of the account records, in bytes.
const (
	MaxUserNameLen = 64  // User.Name
	MaxWebhookLen  = 512 // User.Webhook
)

// User is an account of the admin web.
type User struct {
	Name string // 1..MaxUserNameLen bytes of a-z 0-9 . _ @ - (ValidUserName)
	Role Role
	// PasswordHash is the password's hash in PHC string form
	// ("$argon2id$v=19$m=…,t=…,p=…$salt$hash"). It is never shown.
	PasswordHash string
	Disabled     bool
	CreatedAt    time.Time
	CreatedBy    string // the user who added it; "" for the first admin (IDKEEPER_ADMIN_PASSWORD)
	// Epoch changes whenever the account's sessions must end: the user is disabled,
	// changes or is given a new password, or gets another role. A session records
	// the Epoch of its login and is void under any other.
	Epoch             uint64
	PasswordChangedAt time.Time
	LastLoginAt       time.Time // zero: never logged in
	// Webhook is the Discord webhook URL the user's alerts go to; "" for none.
	// The user sets it (Service.SetWebhook). It is stored as given, usable by
	// the alert jobs, but its token is a secret: anyone holding the URL can post
	// to the channel. It is shown only masked (discord.Mask) and never logged or
	// put in the audit log.
	Webhook string
	// Version is the store's: every UpdateUser increments it, and refuses a record
	// read before another update (ErrConflict).
	Version uint64

	operator bool // OperatorActor: not an account; never stored
}

// ValidUserName reports whether name may name an account: 1..MaxUserNameLen bytes
// of lower-case ASCII letters, digits, '.', '_', '@' and '-'.
func ValidUserName(name string) bool {
	if name == "" || len(name) > MaxUserNameLen {
		return false
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '@' || c == '-') {
			return false
		}
	}
	return true
}

// Session is a logged-in browser session. The cookie holds a random token;
// the store keeps only its SHA-256 (ID), so a copy of the store opens no session.
type Session struct {
	ID        string // hex SHA-256 of the cookie's token
	User      string
	Epoch     uint64 // the user's Epoch at login
	CreatedAt time.Time
	SeenAt    time.Time // the last request made with it (recorded at most once a minute)
	ExpiresAt time.Time // absolute end; the idle end is SeenAt + the idle timeout
	RemoteIP  string    // the address it logged in from
	UserAgent string    // cut at audit.MaxFieldLen bytes
}

// Store keeps the records of the admin web: accounts and sessions, the allow-list
// and the audit log. Every method is atomic and safe for concurrent use by several
// processes sharing the store. Times are stored to the millisecond. Errors:
// idkeeper.ErrNotFound and idkeeper.ErrConflict as stated, any other error for a
// failing store.
type Store interface {
	// CreateUser stores u with Version 1; ErrConflict when the name exists.
	CreateUser(ctx context.Context, u User) error
	// User returns the account with that name; ErrNotFound when there is none.
	User(ctx context.Context, name string) (User, error)
	// Users returns every account, sorted by name.
	Users(ctx context.Context) ([]User, error)
	// UpdateUser replaces the stored account u.Name with u, and its Version with
	// u.Version + 1, when the stored Version is u.Version; ErrConflict when it is
	// not (another update came first: read again), ErrNotFound when there is none.
	UpdateUser(ctx context.Context, u User) error
	// CountUsers returns how many accounts exist.
	CountUsers(ctx context.Context) (int, error)

	// CreateSession stores s; ErrConflict when its ID exists.
	CreateSession(ctx context.Context, s Session) error
	// Session returns the session with that ID; ErrNotFound when there is none. A
	// store never drops a session by itself: callers judge its ends.
	Session(ctx context.Context, id string) (Session, error)
	// TouchSession raises the session's SeenAt to at (never lowers it); a missing
	// session is no error.
	TouchSession(ctx context.Context, id string, at time.Time) error
	// DeleteSession deletes the session; a missing one is no error.
	DeleteSession(ctx context.Context, id string) error
	// DeleteUserSessions deletes every session of the user and returns how many.
	DeleteUserSessions(ctx context.Context, user string) (int, error)
	// PruneSessions deletes the sessions whose ExpiresAt is not after now or whose
	// SeenAt + idle is not after now, and returns how many.
	PruneSessions(ctx context.Context, now time.Time, idle time.Duration) (int, error)

	allowlist.Store
	audit.Store
}
