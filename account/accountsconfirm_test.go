package account_test

import (
	"errors"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/protocol"
)

// ConfirmPassword (issue #29: the restore's second factor) checks the user's own
// password as a login does, under the account's login throttle, and the role
// the account holds now: an empty, wrong or throttled password is
// INVALID_REQUEST naming the field; a disabled account SESSION_EXPIRED; a
// demoted one FORBIDDEN.
func TestConfirmPassword(t *testing.T) {
	e := newAcctEnv(t)
	bob := e.addUser(t, "bob", account.RoleAdmin)
	if err := e.acc.ConfirmPassword(actx, bob, "password", bobPW, account.RoleAdmin); err != nil {
		t.Fatalf("the right password: %v", err)
	}
	for _, pw := range []string{"", "not the password"} {
		err := e.acc.ConfirmPassword(actx, bob, "password", pw, account.RoleAdmin)
		var ie *idkeeper.Error
		if protocol.ErrorCode(err) != protocol.CodeInvalidRequest || !errors.As(err, &ie) || ie.Field != "password" {
			t.Fatalf("password %q: %v", pw, err)
		}
	}
	// Wrong passwords count as failed logins of the account: after the limit the
	// right one is throttled, and so is a login.
	for range account.LoginPairFailures - 1 {
		_ = e.acc.ConfirmPassword(actx, bob, "password", "not the password", account.RoleAdmin)
	}
	err := e.acc.ConfirmPassword(actx, bob, "password", bobPW, account.RoleAdmin)
	var ie *idkeeper.Error
	if !errors.As(err, &ie) || ie.Details["retryAfterSeconds"] == nil {
		t.Fatalf("after %d wrong passwords: %v", account.LoginPairFailures, err)
	}
	// From the same source (actx carries no address); another source is not
	// refused (TestLogin_WrongPasswordsDoNotLockTheAccount).
	if _, _, err := e.acc.Login(actx, "bob", bobPW, "", "ua"); protocol.ErrorCode(err) != protocol.CodeLoginFailed {
		t.Fatalf("a login after the throttled confirmations: %v", err)
	}
	e.clk.Advance(account.LoginThrottleWindow)

	// The account as it is now: demoted, disabled.
	if _, err := e.acc.SetRole(actx, e.root, "bob", account.RoleOperator); err != nil {
		t.Fatal(err)
	}
	if err := e.acc.ConfirmPassword(actx, bob, "password", bobPW, account.RoleAdmin); protocol.ErrorCode(err) != protocol.CodeForbidden {
		t.Fatalf("a demoted admin: %v", err)
	}
	if _, err := e.acc.SetDisabled(actx, e.root, "bob", true); err != nil {
		t.Fatal(err)
	}
	if err := e.acc.ConfirmPassword(actx, bob, "password", bobPW, account.RoleAdmin); protocol.ErrorCode(err) != protocol.CodeSessionExpired {
		t.Fatalf("a disabled account: %v", err)
	}
}
