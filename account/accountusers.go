package account

import (
	"context"
	"errors"
	"fmt"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
)

// The account management of Service: who may change which account, and how.

// CreateUser adds the account name with role and password, created by actor, and
// returns it. Errors: FORBIDDEN unless actor is an enabled admin; INVALID_REQUEST
// naming "name", "role" or "password"; PASSWORD_TOO_COMMON; CONFLICT when the
// name exists.
func (a *Service) CreateUser(ctx context.Context, actor User, name string, role Role, password string) (User, error) {
	if _, err := a.authorize(ctx, actor); err != nil {
		return User{}, err
	}
	switch {
	case !ValidUserName(name):
		return User{}, protocol.Invalidf("name", "a user name is 1 to %d of a-z 0-9 . _ @ -", MaxUserNameLen)
	case !role.Valid():
		return User{}, protocol.Invalidf("role", "the role is one of %s, %s, %s", RoleViewer, RoleOperator, RoleAdmin)
	}
	if err := a.checkNewPassword("password", password); err != nil {
		return User{}, err
	}
	u, err := a.newUser(name, role, password, actor.Name)
	if err != nil {
		return User{}, err
	}
	if err := a.store.CreateUser(ctx, u); errors.Is(err, idkeeper.ErrConflict) {
		return User{}, protocol.Errorf(protocol.CodeConflict, "a user named %q exists", name)
	} else if err != nil {
		return User{}, storeErr(err)
	}
	u.Version = 1
	a.audit(ctx, audit.Entry{Actor: actor.AuditActor(), Action: audit.UserCreate, Target: "user:" + name,
		Detail: "role " + string(role)})
	return u, nil
}

// SetRole gives the account name role, ending its sessions. Errors: FORBIDDEN
// unless actor is an enabled admin, or for an admin's own role; INVALID_REQUEST
// ("role"); NOT_FOUND; CONFLICT when it would leave no enabled admin. The same
// role is no change.
func (a *Service) SetRole(ctx context.Context, actor User, name string, role Role) (User, error) {
	if !role.Valid() {
		return User{}, protocol.Invalidf("role", "the role is one of %s, %s, %s", RoleViewer, RoleOperator, RoleAdmin)
	}
	return a.adminChange(ctx, actor, name, role != RoleAdmin, "change their own role", func(u *User) (string, error) {
		if u.Role == role {
			return "", errUnchanged
		}
		was := u.Role
		u.Role = role
		return fmt.Sprintf("role %s → %s", was, role), nil
	})
}

// SetDisabled disables the account name (ending its sessions) or enables it again.
// Errors: FORBIDDEN unless actor is an enabled admin, or to disable oneself;
// NOT_FOUND; CONFLICT when it would leave no enabled admin. The same state is no
// change.
func (a *Service) SetDisabled(ctx context.Context, actor User, name string, disabled bool) (User, error) {
	return a.adminChange(ctx, actor, name, disabled, "disable themselves", func(u *User) (string, error) {
		if u.Disabled == disabled {
			return "", errUnchanged
		}
		u.Disabled = disabled
		if disabled {
			return "disabled", nil
		}
		return "enabled", nil
	})
}

// adminChange applies change to the account name for an admin actor. demotes
// tells that the change leaves name without enabled admin rights: refused for the
// actor's own account (selfWhat says what that would do) and for the last enabled
// admin (which only replicas racing each other can reach: the actor is one).
// A change ends the account's sessions (Epoch + 1).
func (a *Service) adminChange(ctx context.Context, actor User, name string, demotes bool, selfWhat string,
	change func(*User) (string, error)) (User, error) {
	a.adminMu.Lock() // so that two admins of one process cannot demote each other at once
	defer a.adminMu.Unlock()
	if _, err := a.authorize(ctx, actor); err != nil {
		return User{}, err
	}
	if demotes && name == actor.Name {
		return User{}, protocol.Errorf(protocol.CodeForbidden, "an admin cannot %s", selfWhat)
	}
	detail := ""
	u, err := a.update(ctx, name, func(u *User) error {
		if demotes && u.Role == RoleAdmin && !u.Disabled {
			if err := a.otherAdmins(ctx, name); err != nil {
				return err
			}
		}
		d, err := change(u)
		if err != nil {
			return err
		}
		detail = d
		u.Epoch++
		return nil
	})
	if err != nil || detail == "" {
		return u, err
	}
	a.endSessions(ctx, name)
	a.audit(ctx, audit.Entry{Actor: actor.AuditActor(), Action: audit.UserUpdate, Target: "user:" + name, Detail: detail})
	return u, nil
}

// otherAdmins returns CONFLICT unless an enabled admin other than name exists.
func (a *Service) otherAdmins(ctx context.Context, name string) error {
	all, err := a.store.Users(ctx)
	if err != nil {
		return storeErr(err)
	}
	for _, o := range all {
		if o.Name != name && o.Role == RoleAdmin && !o.Disabled {
			return nil
		}
	}
	return protocol.Errorf(protocol.CodeConflict, "%q is the last enabled admin", name)
}

// ResetPassword gives the account name a new password, ending its sessions.
// Errors: FORBIDDEN unless actor is an enabled admin, or for the actor's own
// account (ChangePassword, with the old one, is for that); INVALID_REQUEST
// ("password"); PASSWORD_TOO_COMMON; NOT_FOUND.
func (a *Service) ResetPassword(ctx context.Context, actor User, name, newPassword string) (User, error) {
	if _, err := a.authorize(ctx, actor); err != nil {
		return User{}, err
	}
	if name == actor.Name {
		return User{}, protocol.Errorf(protocol.CodeForbidden, "change your own password with the current one")
	}
	if err := a.checkNewPassword("password", newPassword); err != nil {
		return User{}, err
	}
	return a.setPassword(ctx, actor.AuditActor(), name, newPassword, "reset by an admin")
}

// ChangePassword changes the password of user, who gives the current one (old),
// and ends all of user's sessions, this one too. The current password is checked
// as ConfirmPassword checks it. Errors: ConfirmPassword's; INVALID_REQUEST naming
// "newPassword" (CheckPassword, or equal to the old one); PASSWORD_TOO_COMMON
// naming "newPassword".
func (a *Service) ChangePassword(ctx context.Context, user User, old, newPassword string) (User, error) {
	if err := a.ConfirmPassword(ctx, user, "oldPassword", old, RoleViewer); err != nil {
		return User{}, err
	}
	if err := a.checkNewPassword("newPassword", newPassword); err != nil {
		return User{}, err
	}
	if newPassword == old {
		return User{}, protocol.Invalidf("newPassword", "the new password is the current one")
	}
	return a.setPassword(ctx, user.AuditActor(), user.Name, newPassword, "changed by the user")
}

// ConfirmPassword checks that pw is the current password of user, who is logged
// in and confirms a change with it (field names the request member; a restore
// asks for it again, issue #29), and that the account holds at least role now.
// It is throttled as a login of user from the address in ctx (audit.WithRemoteIP): a
// wrong password counts as a failed login (LoginPairFailures), and a slowed
// account waits its turn first. Errors: INVALID_REQUEST naming field (empty,
// wrong, or throttled with Details "retryAfterSeconds"); LOGIN_THROTTLE_FULL;
// SESSION_EXPIRED when the account is gone or disabled; FORBIDDEN when its role
// is below role; STORE_UNAVAILABLE; ctx's.
func (a *Service) ConfirmPassword(ctx context.Context, user User, field, pw string, role Role) error {
	if pw == "" {
		return protocol.Invalidf(field, "give your password again to confirm")
	}
	at, err := a.throttle.begin(ctx, a.cfg.Clock, a.cfg.Sleep, user.Name, addressKey(audit.RemoteIPFrom(ctx)))
	if err != nil {
		var te *idkeeper.Error
		if errors.As(err, &te) && te.Code == protocol.CodeLoginFailed {
			e := protocol.Invalidf(field, "too many wrong passwords; retry later")
			e.Details = te.Details
			return e
		}
		return err
	}
	cur, err := a.store.User(ctx, user.Name)
	if errors.Is(err, idkeeper.ErrNotFound) || err == nil && cur.Disabled {
		at.end(a.cfg.Clock(), attemptVoid)
		return errSessionExpired
	} else if err != nil {
		at.end(a.cfg.Clock(), attemptVoid)
		return storeErr(err)
	}
	ok, verr := a.hasher.Verify(cur.PasswordHash, cutBytes(pw, MaxPasswordLen))
	if verr != nil {
		a.log.Error("a stored password hash does not parse", "user", user.Name, "err", verr)
	}
	if !ok || len(pw) > MaxPasswordLen {
		if at.end(a.cfg.Clock(), attemptFailed) {
			a.log.Warn("password confirmation throttled", "user", user.Name, "remoteIp", audit.RemoteIPFrom(ctx))
		}
		return protocol.Invalidf(field, "the current password is wrong")
	}
	at.end(a.cfg.Clock(), attemptSucceeded)
	if !cur.Role.AtLeast(role) {
		return protocol.Errorf(protocol.CodeForbidden, "this needs the role %s; %s has the role %s", role, user.Name, cur.Role)
	}
	return nil
}

// setPassword stores a hash of pw as name's password, Epoch + 1, and ends its
// sessions; actor is the audit log's (User.AuditActor).
func (a *Service) setPassword(ctx context.Context, actor, name, pw, detail string) (User, error) {
	hash, err := a.hasher.Hash(pw)
	if err != nil {
		return User{}, &idkeeper.Error{Code: protocol.CodeInternal, Message: "internal error", Err: err}
	}
	now := protocol.Millis(a.cfg.Clock())
	u, err := a.update(ctx, name, func(u *User) error {
		u.PasswordHash, u.PasswordChangedAt = hash, now
		u.Epoch++
		return nil
	})
	if err != nil {
		return User{}, err
	}
	a.endSessions(ctx, name)
	a.audit(ctx, audit.Entry{Actor: actor, Action: audit.PasswordChange, Target: "user:" + name, Detail: detail})
	return u, nil
}

// Users returns every account sorted by name, without password hashes.
func (a *Service) Users(ctx context.Context) ([]User, error) {
	all, err := a.store.Users(ctx)
	if err != nil {
		return nil, storeErr(err)
	}
	for i := range all {
		all[i].PasswordHash = ""
	}
	return all, nil
}

// authorize returns actor's stored record when it is an enabled admin, else
// FORBIDDEN. It reads the store: a role or state changed since the actor's
// session was checked counts. An OperatorActor is authorised as it is.
func (a *Service) authorize(ctx context.Context, actor User) (User, error) {
	if actor.IsOperator() {
		return actor, nil
	}
	u, err := a.store.User(ctx, actor.Name)
	if errors.Is(err, idkeeper.ErrNotFound) {
		return User{}, errNotAdmin
	} else if err != nil {
		return User{}, storeErr(err)
	}
	if u.Disabled || u.Role != RoleAdmin {
		return User{}, errNotAdmin
	}
	return u, nil
}

// update reads the account name, applies fn and stores it, again from the read
// while another update comes first (ErrConflict), at most maxRetries times. fn
// returning errUnchanged stores nothing and returns the account as read.
func (a *Service) update(ctx context.Context, name string, fn func(*User) error) (User, error) {
	for range maxRetries {
		u, err := a.store.User(ctx, name)
		if errors.Is(err, idkeeper.ErrNotFound) {
			return User{}, protocol.Errorf(protocol.CodeNotFound, "no user named %q", name)
		} else if err != nil {
			return User{}, storeErr(err)
		}
		if err := fn(&u); errors.Is(err, errUnchanged) {
			return u, nil
		} else if err != nil {
			return User{}, err
		}
		err = a.store.UpdateUser(ctx, u)
		switch {
		case err == nil:
			u.Version++
			return u, nil
		case errors.Is(err, idkeeper.ErrNotFound):
			return User{}, protocol.Errorf(protocol.CodeNotFound, "no user named %q", name)
		case !errors.Is(err, idkeeper.ErrConflict):
			return User{}, storeErr(err)
		}
		if err := ctx.Err(); err != nil {
			return User{}, err
		}
	}
	return User{}, protocol.Errorf(protocol.CodeConflict, "the user %q changed %d times meanwhile; retry", name, maxRetries)
}

// endSessions deletes name's sessions. A failure is logged: the new Epoch voids
// them anyway.
func (a *Service) endSessions(ctx context.Context, name string) {
	if _, err := a.store.DeleteUserSessions(ctx, name); err != nil {
		a.log.Warn("delete the sessions of a user", "user", name, "err", err)
	}
}

// newUser is the record of a new account: Epoch 1, hashed password.
func (a *Service) newUser(name string, role Role, password, by string) (User, error) {
	hash, err := a.hasher.Hash(password)
	if err != nil {
		return User{}, &idkeeper.Error{Code: protocol.CodeInternal, Message: "internal error", Err: err}
	}
	now := protocol.Millis(a.cfg.Clock())
	return User{Name: name, Role: role, PasswordHash: hash, CreatedAt: now, CreatedBy: by, Epoch: 1,
		PasswordChangedAt: now}, nil
}
