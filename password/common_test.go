package password_test

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper/password"
)

func TestIsCommon(t *testing.T) {
	if n := password.CommonCount(); n < 3000 {
		t.Fatalf("%d common passwords known, ASVS 5.0 V6.2.12 wants at least the top 3,000", n)
	}
	for _, pw := range []string{"123456", "password", "PassWord", "winniethepooh", "WinnieThePooh", "iloveyou",
		"Password2024!", "qwerty123456", "dragon 2024", "monkey!!!!!!!", "letmein#1"} {
		if !password.IsCommon(pw) {
			t.Errorf("%q is not common", pw)
		}
	}
	for _, pw := range []string{"", "correct horse battery staple", "a quiet walk by the river", "root password 123",
		"reset-password-1234", "192.0.2.1", "2026-03-01 12:00", "839201746583", "password-manager-output",
		"xpassword123", strings.Repeat("x", password.MaxLen+1)} {
		if password.IsCommon(pw) {
			t.Errorf("%q is common", pw)
		}
	}
	var h password.Hasher
	if !h.IsCommon("Password1234") {
		t.Error("Hasher.IsCommon differs")
	}
}

// Passwords as dev and the password generators make them (random base64url)
// are never refused.
func TestRandomPasswordsAreNotCommon(t *testing.T) {
	for range 10_000 {
		var b [16]byte
		_, _ = rand.Read(b[:])
		if pw := base64.RawURLEncoding.EncodeToString(b[:]); password.IsCommon(pw) {
			t.Fatalf("%q is common", pw)
		}
	}
}
