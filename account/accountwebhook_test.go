package account_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/discord"
	"github.com/idkeeper/idkeeper/protocol"
)

// webhookAccounts returns a Service over e's store that takes Discord webhook URLs,
// as the server's do.
func (e *acctEnv) webhookAccounts(t *testing.T) *account.Service {
	t.Helper()
	acc, err := account.New(e.store, e.hasher, account.Config{Clock: e.clk.Now, Logger: quiet,
		ValidWebhook: discord.ValidWebhookURL})
	if err != nil {
		t.Fatal(err)
	}
	return acc
}

// Every user sets and clears their own webhook, whatever the role; the sessions
// stay; the store keeps the URL whole; the audit log names it masked only.
func TestSetWebhook(t *testing.T) {
	e := newAcctEnv(t)
	acc := e.webhookAccounts(t)
	hook := "https://discord.com/api/webhooks/112233445566778899/tok_Zy-0123456789_abcdefghijklmnopqrstuvwxyzWXYZ"
	for _, role := range []account.Role{account.RoleViewer, account.RoleOperator, account.RoleAdmin} {
		name := "u-" + string(role)
		e.addUser(t, name, role)
		tok := e.login(t, name, bobPW, "192.0.2.9")
		me, _, err := acc.Authenticate(actx, tok)
		if err != nil {
			t.Fatal(err)
		}
		u, err := acc.SetWebhook(actx, me, "  "+hook+"\n")
		if err != nil || u.Webhook != hook || u.PasswordHash != "" || u.Epoch != me.Epoch {
			t.Fatalf("%s: SetWebhook: %+v, %v", role, u, err)
		}
		if stored, _ := e.store.User(actx, name); stored.Webhook != hook || stored.Epoch != me.Epoch {
			t.Fatalf("%s: stored %+v", role, stored)
		}
		e.wantSession(t, tok, true)
	}
	bob := e.addUser(t, "bob", account.RoleViewer)

	// The same URL again: no change, no entry.
	before := len(e.auditLog(t))
	if _, err := acc.SetWebhook(actx, account.User{Name: "u-viewer"}, hook); err != nil {
		t.Fatal(err)
	}
	if n := len(e.auditLog(t)); n != before {
		t.Errorf("the same webhook again added %d audit entries", n-before)
	}

	// Refused: not a Discord webhook, too long; the error names the member and
	// what is wrong, never the token.
	for _, bad := range []string{
		strings.Replace(hook, "https", "http", 1),
		strings.Replace(hook, "discord.com", "discord.com.evil.example", 1),
		hook + "/extra",
		hook + "?token=x",
		"https://discord.com/api/webhooks/1/" + strings.Repeat("a", account.MaxWebhookLen),
	} {
		_, err := acc.SetWebhook(actx, bob, bad)
		wantCode(t, err, protocol.CodeInvalidRequest)
		var de *idkeeper.Error
		if !errors.As(err, &de) || de.Field != "url" || strings.Contains(err.Error(), "tok_Zy") {
			t.Errorf("%q: %v", bad, err)
		}
		if len(bad) <= account.MaxWebhookLen && !errors.Is(err, discord.ErrInvalidWebhookURL) {
			t.Errorf("%q: %v does not wrap the validator's error", bad, err)
		}
	}
	if u, _ := e.store.User(actx, "bob"); u.Webhook != "" {
		t.Fatalf("a refused URL was stored: %q", u.Webhook)
	}

	// Without a validator no URL is taken; clearing works.
	_, err := e.acc.SetWebhook(actx, bob, hook)
	wantCode(t, err, protocol.CodeInvalidRequest)
	if _, err := e.acc.SetWebhook(actx, account.User{Name: "u-admin"}, ""); err != nil {
		t.Fatal(err)
	}
	if u, _ := e.store.User(actx, "u-admin"); u.Webhook != "" {
		t.Fatalf("not cleared: %q", u.Webhook)
	}

	// Only an enabled account sets its own.
	if _, err := acc.SetDisabled(actx, e.root, "bob", true); err != nil {
		t.Fatal(err)
	}
	_, err = acc.SetWebhook(actx, bob, hook)
	wantCode(t, err, protocol.CodeSessionExpired)
	_, err = acc.SetWebhook(actx, account.User{Name: "nobody"}, hook)
	wantCode(t, err, protocol.CodeSessionExpired)
	_, err = acc.SetWebhook(actx, account.OperatorActor("alice"), hook)
	wantCode(t, err, protocol.CodeForbidden)

	// The audit log: set (masked as discord.Mask shows it) and cleared.
	var got []string
	for _, a := range e.auditLog(t) {
		if strings.Contains(a.Detail+a.Target+a.Actor, "tok_Zy") {
			t.Fatalf("the audit log holds the token: %+v", a)
		}
		if a.Action == audit.UserWebhook {
			got = append(got, a.Actor+" "+a.Detail)
		}
	}
	want := []string{"user:u-viewer set " + discord.Mask(hook), "user:u-operator set " + discord.Mask(hook),
		"user:u-admin set " + discord.Mask(hook), "user:u-admin cleared"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("audit %q, want %q", got, want)
	}
}

// The audit log masks a webhook as discord.Mask shows it, whatever the host's
// case or the token's length.
func TestSetWebhookMask(t *testing.T) {
	e := newAcctEnv(t)
	acc := e.webhookAccounts(t)
	u := e.addUser(t, "bob", account.RoleViewer)
	for _, hook := range []string{
		"https://PTB.Discord.com/api/webhooks/1/abcdefghijklmnop",
		"https://discordapp.com/api/webhooks/42/short",
		"https://canary.discord.com/api/webhooks/12345678901234567890/" + strings.Repeat("x_-Y", 25),
	} {
		if _, err := acc.SetWebhook(actx, u, hook); err != nil {
			t.Fatal(err)
		}
		log := e.auditLog(t)
		last := log[len(log)-1]
		if last.Action != audit.UserWebhook || last.Detail != "set "+discord.Mask(hook) {
			t.Errorf("%s: audit detail %q, want %q", hook, last.Detail, "set "+discord.Mask(hook))
		}
	}
}
