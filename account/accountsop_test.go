package account_test

import (
	"testing"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/protocol"
)

// The operator of the store (idkeeper users --store) may do what an admin may,
// on a store without accounts too, and the audit log names it.
func TestOperatorActor(t *testing.T) {
	e := newAcctEnv(t)
	op := account.OperatorActor("alice")
	u, err := e.acc.CreateUser(actx, op, "carol", account.RoleViewer, bobPW)
	if err != nil || u.CreatedBy != "operator:alice" {
		t.Fatalf("CreateUser by the operator: %+v, %v", u, err)
	}
	if _, err := e.acc.SetDisabled(actx, op, "carol", true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.acc.ResetPassword(actx, op, "root", "a new root password"); err != nil {
		t.Fatal(err)
	}
	// The last enabled admin stays protected.
	if _, err := e.acc.SetRole(actx, op, "root", account.RoleViewer); protocol.ErrorCode(err) != protocol.CodeConflict {
		t.Fatalf("demoting the last admin: %v", err)
	}
	es, err := e.store.AuditEntriesBefore(actx, 0, 3)
	if err != nil || len(es) != 3 {
		t.Fatal(es, err)
	}
	for _, x := range es {
		if x.Actor != "operator:alice" {
			t.Fatalf("entry %+v, want the actor operator:alice", x)
		}
	}
	// An operator is no account: it cannot log in, and a user of that name is
	// another actor.
	if u := (account.User{Name: "alice"}); u.AuditActor() != "user:alice" {
		t.Fatal(u.AuditActor())
	}
}

// An operator whose OS user shares a name with an account is still not that
// account: it may disable it.
func TestOperatorIsNoAccount(t *testing.T) {
	e := newAcctEnv(t)
	e.addUser(t, "root2", account.RoleAdmin)
	if _, err := e.acc.SetDisabled(actx, account.OperatorActor("root"), "root", true); err != nil {
		t.Fatalf("the operator \"root\" disabling the account root: %v", err)
	}
}
