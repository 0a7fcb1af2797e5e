// Package account owns the admin web's accounts: users and their roles, logins
// and the login throttle (per account and source, with a slow-down per account),
// sessions and their timeouts, the password policy (length, common passwords) and
// each user's Discord webhook. Service is that policy over the root package's
// Store; every change it makes is audited (package audit). The records
// themselves (User, Session) stay in the root, beside the
// store contract that keeps them.
package account

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
)

// Bounds of a password, in bytes. Length is the rule, not composition (NIST SP
// 800-63B §3.1.1.2); 12 is OWASP's floor for accounts without a second factor,
// and these accounts manage every service's keys. The upper bound keeps forms
// and hashing bounded while admitting any passphrase. Any bytes are allowed.
const (
	MinPasswordLen = 12
	MaxPasswordLen = 1024
)

// Defaults and bounds of Config.
const (
	DefaultIdleTimeout     = 30 * time.Minute
	DefaultAbsoluteTimeout = 12 * time.Hour
	MaxAbsoluteTimeout     = 30 * 24 * time.Hour
	// SessionTouchInterval: a session's SeenAt is written at most this often, so a
	// busy page does not write the store on every request. The idle end is thus
	// known to within this interval.
	SessionTouchInterval = time.Minute
)

// maxRetries bounds the re-reads after ErrConflict of one update or append.
const maxRetries = 20

// PasswordHasher hashes and checks passwords; password.Hasher satisfies it. A
// hasher that also has NeedsRehash(hash string) bool gets the hashes of older
// parameters replaced at the next successful login.
type PasswordHasher interface {
	// Hash returns a new encoded hash of pw, under a random salt.
	Hash(pw string) (string, error)
	// Verify reports whether pw is the password of hash; an error for a hash
	// that does not parse.
	Verify(hash, pw string) (bool, error)
}

// Config configures Service. Zero fields mean the default.
type Config struct {
	Clock  idkeeper.Clock // time.Now
	Logger *slog.Logger   // slog.Default()
	// IdleTimeout ends a session not used for that long: DefaultIdleTimeout,
	// SessionTouchInterval..24 h.
	IdleTimeout time.Duration
	// AbsoluteTimeout ends a session that long after its login, however busy:
	// DefaultAbsoluteTimeout, IdleTimeout..MaxAbsoluteTimeout.
	AbsoluteTimeout time.Duration
	// ValidWebhook decides which webhook URLs SetWebhook stores: nil for a
	// usable one, else an error saying what is wrong, which must not contain
	// the URL's secret (discord.ValidWebhookURL). Nil: no URL is accepted, and
	// a user can only clear theirs.
	ValidWebhook func(url string) error
	// Sleep waits d or until ctx ends (then ctx's error): the login throttle's
	// slow-down waits with it. Nil: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Service is the policy of the admin web's accounts over an Store: logins
// and their throttle, sessions and their timeouts, who may change which account,
// and the audit log. Its methods are safe for concurrent use; store failures
// come back as STORE_UNAVAILABLE.
//
// Every change is audited, after it is made: an audit entry that cannot be
// appended is logged at error level, and the change stands.
type Service struct {
	store  Store
	hasher PasswordHasher
	cfg    Config
	log    *slog.Logger

	throttle  throttle
	dummyOnce sync.Once
	dummyHash string     // a hash of a random password: unknown names are checked against it
	adminMu   sync.Mutex // serialises this process's changes of roles and disabling
}

// New returns a Service over store. It validates cfg (a *RangeError names a
// setting outside its range) and does no I/O.
func New(store Store, hasher PasswordHasher, cfg Config) (*Service, error) {
	if store == nil || hasher == nil {
		return nil, errors.New("account: New needs a store and a hasher")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepCtx
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.AbsoluteTimeout == 0 {
		cfg.AbsoluteTimeout = max(DefaultAbsoluteTimeout, cfg.IdleTimeout)
	}
	if cfg.IdleTimeout < SessionTouchInterval || cfg.IdleTimeout > 24*time.Hour {
		return nil, &idkeeper.RangeError{Setting: "session-idle-timeout", Value: cfg.IdleTimeout.String(), Min: SessionTouchInterval.String(), Max: "24h0m0s"}
	}
	if cfg.AbsoluteTimeout < cfg.IdleTimeout || cfg.AbsoluteTimeout > MaxAbsoluteTimeout {
		return nil, &idkeeper.RangeError{Setting: "session-absolute-timeout", Value: cfg.AbsoluteTimeout.String(),
			Min: "session-idle-timeout (" + cfg.IdleTimeout.String() + ")", Max: MaxAbsoluteTimeout.String()}
	}
	return &Service{store: store, hasher: hasher, cfg: cfg, log: cfg.Logger}, nil
}

// LoginThrottleFullRefusals is how many logins this process refused with
// LOGIN_THROTTLE_FULL: the login throttle's table was full of live entries.
func (a *Service) LoginThrottleFullRefusals() uint64 { return a.throttle.full.Load() }

// Config returns the configuration with its defaults filled in.
func (a *Service) Config() Config { return a.cfg }

// CheckPassword returns nil when pw may become a password (MinPasswordLen..
// MaxPasswordLen bytes), or an INVALID_REQUEST Error naming field. A Service also
// refuses the common passwords its hasher knows (checkNewPassword).
func CheckPassword(field, pw string) error {
	if len(pw) < MinPasswordLen || len(pw) > MaxPasswordLen {
		return protocol.Invalidf(field, "a password has %d to %d bytes", MinPasswordLen, MaxPasswordLen)
	}
	return nil
}

// PasswordTooCommon is the refusal of a new password that is on the list of
// common passwords: PASSWORD_TOO_COMMON naming field.
func PasswordTooCommon(field string) *idkeeper.Error {
	return &idkeeper.Error{Code: protocol.CodePasswordTooCommon, Field: field,
		Message: "this password is one of the most common ones (perhaps with digits or symbols added), among the first an attacker tries; choose another"}
}

// checkNewPassword is CheckPassword and, when the hasher has IsCommon(pw string)
// bool (password.Hasher does), the list of common passwords: PasswordTooCommon.
func (a *Service) checkNewPassword(field, pw string) error {
	if err := CheckPassword(field, pw); err != nil {
		return err
	}
	if c, ok := a.hasher.(interface{ IsCommon(string) bool }); ok && c.IsCommon(pw) {
		return PasswordTooCommon(field)
	}
	return nil
}

var (
	errLoginFailed    = &idkeeper.Error{Code: protocol.CodeLoginFailed, Message: "unknown user name or wrong password"}
	errSessionExpired = &idkeeper.Error{Code: protocol.CodeSessionExpired, Message: "the session has ended; log in again"}
	errNotAdmin       = &idkeeper.Error{Code: protocol.CodeForbidden, Message: "only an admin may manage accounts"}
	errUnchanged      = errors.New("unchanged")
)

// EnsureFirstAdmin creates the admin name with password when the store holds no
// account yet (CreatedBy ""), and reports whether it did; with any account there
// it does nothing, whatever name and password are. Errors: INVALID_REQUEST for a
// name or password (CheckPassword) that is not valid, PASSWORD_TOO_COMMON, when
// it would create.
func (a *Service) EnsureFirstAdmin(ctx context.Context, name, password string) (created bool, err error) {
	n, err := a.store.CountUsers(ctx)
	if err != nil || n > 0 {
		return false, storeErr(err)
	}
	if !ValidUserName(name) {
		return false, protocol.Invalidf("name", "a user name is 1 to %d of a-z 0-9 . _ @ -", MaxUserNameLen)
	}
	if err := a.checkNewPassword("password", password); err != nil {
		return false, err
	}
	u, err := a.newUser(name, RoleAdmin, password, "")
	if err != nil {
		return false, err
	}
	if err := a.store.CreateUser(ctx, u); errors.Is(err, idkeeper.ErrConflict) {
		return false, nil // another replica came first
	} else if err != nil {
		return false, storeErr(err)
	}
	a.log.Info("first admin created", "user", name)
	a.audit(ctx, audit.Entry{Actor: "system", Action: audit.UserCreate, Target: "user:" + name, Detail: "first admin, role admin"})
	return true, nil
}

// Login checks name and password and opens a session. It returns the session's
// token, for the cookie (32 random bytes, base64url; only its SHA-256 is stored),
// and the session: Epoch the user's, ending AbsoluteTimeout from now. An unknown
// name, a wrong password, a disabled account and a throttled login (see
// LoginPairFailures) all get one LOGIN_FAILED Error, the same message; a
// throttled one adds Details "retryAfterSeconds" and checks no password. While
// the throttle's table is full, a login from a new source gets
// LOGIN_THROTTLE_FULL. A login of a slowed account waits its turn and delay
// first, within ctx. An unknown name costs one password check too, so timing
// does not tell which names exist.
func (a *Service) Login(ctx context.Context, name, password, remoteIP, userAgent string) (token string, s Session, err error) {
	typed := cleanName(name)
	at, err := a.throttle.begin(ctx, a.cfg.Clock, a.cfg.Sleep, typed, addressKey(remoteIP))
	if err != nil {
		if protocol.ErrorCode(err) == protocol.CodeLoginThrottleFull {
			a.log.Warn("login refused: the login throttle's table is full", "user", typed, "remoteIp", remoteIP)
		} else {
			a.log.Debug("login throttled", "user", typed, "remoteIp", remoteIP, "err", err)
		}
		return "", Session{}, err
	}
	u, known := User{}, false
	if ValidUserName(name) {
		u, err = a.store.User(ctx, name)
		if err != nil && !errors.Is(err, idkeeper.ErrNotFound) {
			at.end(a.cfg.Clock(), attemptVoid)
			return "", Session{}, storeErr(err)
		}
		known = err == nil
	}
	hash := u.PasswordHash
	if !known {
		hash = a.dummy()
	}
	ok, verr := a.hasher.Verify(hash, cutBytes(password, MaxPasswordLen))
	if verr != nil && known {
		a.log.Error("a stored password hash does not parse", "user", name, "err", verr)
	}
	reason := ""
	switch {
	case !known:
		reason = "unknown user"
	case !ok || len(password) > MaxPasswordLen:
		reason = "wrong password"
	case u.Disabled:
		reason = "account disabled"
	}
	if reason != "" {
		if at.end(a.cfg.Clock(), attemptFailed) {
			reason += "; further logins throttled for " + LoginThrottleWindow.String()
			a.log.Warn("login throttled", "user", typed, "remoteIp", remoteIP)
		}
		a.audit(ctx, audit.Entry{Actor: "user:" + typed, Action: audit.LoginFailed, Target: "user:" + typed,
			RemoteIP: remoteIP, Detail: reason})
		return "", Session{}, errLoginFailed
	}
	at.end(a.cfg.Clock(), attemptSucceeded)
	now := protocol.Millis(a.cfg.Clock())

	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	token = base64.RawURLEncoding.EncodeToString(b[:])
	s = Session{ID: SessionID(token), User: u.Name, Epoch: u.Epoch, CreatedAt: now, SeenAt: now,
		ExpiresAt: now.Add(a.cfg.AbsoluteTimeout), RemoteIP: remoteIP, UserAgent: audit.Cut(protocol.TextOnly(userAgent), audit.MaxFieldLen)}
	if err := a.store.CreateSession(ctx, s); err != nil {
		return "", Session{}, storeErr(err)
	}
	rehash := ""
	if r, ok := a.hasher.(interface{ NeedsRehash(string) bool }); ok && r.NeedsRehash(u.PasswordHash) {
		if h, err := a.hasher.Hash(password); err == nil {
			rehash = h
		}
	}
	verified := u.PasswordHash
	if _, err := a.update(ctx, u.Name, func(u *User) error {
		u.LastLoginAt = now
		if rehash != "" && u.PasswordHash == verified {
			u.PasswordHash = rehash
		}
		return nil
	}); err != nil {
		a.log.Warn("record the login time", "user", u.Name, "err", err)
	}
	a.audit(ctx, audit.Entry{Actor: "user:" + u.Name, Action: audit.Login, Target: "user:" + u.Name,
		RemoteIP: remoteIP, Detail: s.UserAgent})
	return token, s, nil
}

// SessionID is the ID under which the session of token is stored: the hex SHA-256
// of the token.
func SessionID(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Authenticate returns the user and session of token. The session is void, and
// deleted, once AbsoluteTimeout has passed since the login or IdleTimeout since
// its last use, or when the user is gone, disabled or of another Epoch (a new
// password, a new role): SESSION_EXPIRED for these and any unknown token. A valid
// session's SeenAt is raised to now at most once per SessionTouchInterval.
func (a *Service) Authenticate(ctx context.Context, token string) (User, Session, error) {
	if !validToken(token) {
		return User{}, Session{}, errSessionExpired
	}
	s, err := a.store.Session(ctx, SessionID(token))
	if errors.Is(err, idkeeper.ErrNotFound) {
		return User{}, Session{}, errSessionExpired
	} else if err != nil {
		return User{}, Session{}, storeErr(err)
	}
	now := a.cfg.Clock()
	void := ""
	switch {
	case !now.Before(s.ExpiresAt):
		void = "absolute timeout"
	case !now.Before(s.SeenAt.Add(a.cfg.IdleTimeout)):
		void = "idle timeout"
	}
	var u User
	if void == "" {
		u, err = a.store.User(ctx, s.User)
		switch {
		case errors.Is(err, idkeeper.ErrNotFound):
			void = "user removed"
		case err != nil:
			return User{}, Session{}, storeErr(err)
		case u.Disabled:
			void = "user disabled"
		case u.Epoch != s.Epoch:
			void = "password or role changed"
		}
	}
	if void != "" {
		if err := a.store.DeleteSession(ctx, s.ID); err != nil {
			a.log.Warn("delete an ended session", "user", s.User, "err", err)
		}
		a.log.Debug("session ended", "user", s.User, "why", void)
		return User{}, Session{}, errSessionExpired
	}
	if now.Sub(s.SeenAt) >= SessionTouchInterval {
		if err := a.store.TouchSession(ctx, s.ID, protocol.Millis(now)); err != nil {
			a.log.Warn("touch a session", "user", s.User, "err", err)
		} else {
			s.SeenAt = protocol.Millis(now)
		}
	}
	return u, s, nil
}

// Logout ends the session of token; an unknown or ended one is no error.
func (a *Service) Logout(ctx context.Context, token string) error {
	if !validToken(token) {
		return nil
	}
	s, err := a.store.Session(ctx, SessionID(token))
	if errors.Is(err, idkeeper.ErrNotFound) {
		return nil
	} else if err != nil {
		return storeErr(err)
	}
	if err := a.store.DeleteSession(ctx, s.ID); err != nil {
		return storeErr(err)
	}
	a.audit(ctx, audit.Entry{Actor: "user:" + s.User, Action: audit.Logout, Target: "user:" + s.User})
	return nil
}

// PruneSessions deletes the sessions past their absolute or idle end and returns
// how many: the periodic job's work. Sessions of disabled users or of an old
// Epoch go at their next use (Authenticate) or when they time out.
func (a *Service) PruneSessions(ctx context.Context) (int, error) {
	n, err := a.store.PruneSessions(ctx, a.cfg.Clock(), a.cfg.IdleTimeout)
	return n, storeErr(err)
}

// Audit appends e to the audit log, sealed after the log's head (audit.Entry.Seal),
// reading the head again when another entry came first, at most maxRetries times
// and within ctx. A zero At is now; an empty RemoteIP is ctx's (audit.WithRemoteIP).
// Errors: STORE_UNAVAILABLE, and the context's.
func (a *Service) Audit(ctx context.Context, e audit.Entry) error {
	if e.At.IsZero() {
		e.At = a.cfg.Clock()
	}
	if e.RemoteIP == "" {
		e.RemoteIP = audit.RemoteIPFrom(ctx)
	}
	for range maxRetries {
		seq, hash, err := a.store.AuditHead(ctx)
		if err != nil {
			return storeErr(err)
		}
		err = a.store.AppendAudit(ctx, e.Seal(seq, hash))
		if !errors.Is(err, idkeeper.ErrConflict) {
			return storeErr(err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return idkeeper.Unavailable(fmt.Errorf("append to the audit log: %d conflicts in a row", maxRetries))
}

// audit is Audit for the changes above: a failure is logged, not returned.
func (a *Service) audit(ctx context.Context, e audit.Entry) {
	if err := a.Audit(ctx, e); err != nil {
		a.log.Error("append to the audit log", "action", e.Action, "actor", e.Actor, "target", e.Target, "err", err)
	}
}

// dummy returns a hash, made once, of a random password that nobody knows.
func (a *Service) dummy() string {
	a.dummyOnce.Do(func() {
		var b [16]byte
		_, _ = rand.Read(b[:])
		h, err := a.hasher.Hash(hex.EncodeToString(b[:]))
		if err != nil {
			a.log.Error("hash the stand-in password of unknown users", "err", err)
		}
		a.dummyHash = h
	})
	return a.dummyHash
}

// validToken reports whether token has the form Login gives: 32 bytes, base64url.
func validToken(token string) bool {
	if len(token) != 43 {
		return false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(token)
	return err == nil && len(b) == 32
}

// cleanName is a login name as typed, fit for the log and the audit: cut to
// MaxUserNameLen bytes, characters that are not text (notText) and invalid UTF-8 as '?'.
func cleanName(name string) string {
	name = strings.ToValidUTF8(cutBytes(name, MaxUserNameLen), "?")
	return strings.Map(func(r rune) rune {
		if protocol.NotText(r) || r == utf8.RuneError {
			return '?'
		}
		return r
	}, name)
}

func cutBytes(s string, n int) string { return s[:min(len(s), n)] }

func storeErr(err error) error {
	var e *idkeeper.Error
	if err == nil || errors.As(err, &e) {
		return err
	}
	return idkeeper.Unavailable(err)
}
