package idkeeper

import (
	"context"
	"errors"
	"math"
)

// ConfirmPassword checks, for a change that a session alone does not carry
// (issue #29: a restore), that the logged-in user typed their own password
// again, and that the account still holds role; it is checked as
// ChangePassword checks the old password, under the same login throttle of the
// account (a wrong password counts as a failed login of it). Errors:
// INVALID_REQUEST naming field when the password is empty, wrong, or the
// account is throttled (Details "retryAfterSeconds"); SESSION_EXPIRED when the
// account is gone or disabled; FORBIDDEN when its role is below role now.
func (a *Accounts) ConfirmPassword(ctx context.Context, user User, field, password string, role Role) error {
	if password == "" {
		return Invalidf(field, "give your password again to confirm")
	}
	now := a.cfg.Clock()
	acct := "u:" + user.Name
	if wait := a.throttle.begin(now, acct); wait > 0 {
		e := Invalidf(field, "too many wrong passwords; retry later")
		e.Details = map[string]any{"retryAfterSeconds": int(math.Ceil(wait.Seconds()))}
		return e
	}
	cur, err := a.store.User(ctx, user.Name)
	if errors.Is(err, ErrNotFound) || err == nil && cur.Disabled {
		a.throttle.undo(acct)
		return errSessionExpired
	} else if err != nil {
		a.throttle.undo(acct)
		return storeErr(err)
	}
	ok, verr := a.hasher.Verify(cur.PasswordHash, cutBytes(password, MaxPasswordLen))
	if verr != nil {
		a.log.Error("a stored password hash does not parse", "user", user.Name, "err", verr)
	}
	if !ok || len(password) > MaxPasswordLen {
		a.throttle.reached(acct)
		return Invalidf(field, "the password is wrong")
	}
	a.throttle.succeed(acct)
	if !cur.Role.AtLeast(role) {
		return Errorf(CodeForbidden, "this needs the role %s; %s has the role %s", role, user.Name, cur.Role)
	}
	return nil
}
