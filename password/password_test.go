package password

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// cheap are parameters that make a hash take microseconds, for tests.
var cheap = Hasher{Params: Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}}

func TestRoundTrip(t *testing.T) {
	for _, pw := range []string{"correct horse battery", "pässwörd-ünïcode", strings.Repeat("x", MaxLen)} {
		enc, err := cheap.Hash(pw)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(enc, "$argon2id$v=19$m=64,t=1,p=1$") {
			t.Fatalf("Hash: %q", enc)
		}
		if ok, err := cheap.Verify(enc, pw); !ok || err != nil {
			t.Fatalf("Verify of the right password: %v, %v", ok, err)
		}
		if ok, err := cheap.Verify(enc, pw+"!"); ok || err != nil {
			t.Fatalf("Verify of a wrong password: %v, %v", ok, err)
		}
		if ok, err := (Hasher{}).Verify(enc, pw); !ok || err != nil {
			t.Fatalf("Verify uses the encoded parameters, not the hasher's: %v, %v", ok, err)
		}
	}
	a, _ := cheap.Hash("same password here")
	b, _ := cheap.Hash("same password here")
	if a == b {
		t.Fatal("two hashes of one password are equal: the salt is not random")
	}
}

// TestDefaults hashes once with the strong defaults, checking the format.
func TestDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("a 64 MiB hash")
	}
	enc, err := Hash("a strong default password")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Split(enc, "$")
	if len(f) != 6 || f[3] != "m=65536,t=3,p=4" || len(f[4]) != 22 || len(f[5]) != 43 {
		t.Fatalf("Hash with the defaults: %q", enc)
	}
	if ok, err := Verify(enc, "a strong default password"); !ok || err != nil {
		t.Fatalf("Verify: %v, %v", ok, err)
	}
	if NeedsRehash(enc) {
		t.Fatal("NeedsRehash of a default hash")
	}
}

func TestNeedsRehash(t *testing.T) {
	enc, _ := cheap.Hash("some password 1")
	if cheap.NeedsRehash(enc) {
		t.Fatal("NeedsRehash under the same parameters")
	}
	if !NeedsRehash(enc) {
		t.Fatal("NeedsRehash of a cheap hash under the defaults: false")
	}
	other := cheap
	other.Params.Time = 2
	if !other.NeedsRehash(enc) {
		t.Fatal("NeedsRehash after a change of Time: false")
	}
	if !cheap.NeedsRehash("garbage") {
		t.Fatal("NeedsRehash of garbage: false")
	}
}

func TestTampered(t *testing.T) {
	enc, _ := cheap.Hash("the real password")
	f := strings.Split(enc, "$")
	flip := func(s string) string { // change one base64 character in the middle
		b := []byte(s)
		if b[5] == 'A' {
			b[5] = 'B'
		} else {
			b[5] = 'A'
		}
		return string(b)
	}
	for name, e := range map[string]string{
		"salt":   strings.Join([]string{"", f[1], f[2], f[3], flip(f[4]), f[5]}, "$"),
		"key":    strings.Join([]string{"", f[1], f[2], f[3], f[4], flip(f[5])}, "$"),
		"time":   strings.Join([]string{"", f[1], f[2], "m=64,t=2,p=1", f[4], f[5]}, "$"),
		"memory": strings.Join([]string{"", f[1], f[2], "m=72,t=1,p=1", f[4], f[5]}, "$"),
	} {
		if ok, err := cheap.Verify(e, "the real password"); ok || err != nil {
			t.Errorf("%s tampered: Verify %v, %v; want false, nil", name, ok, err)
		}
	}
}

func TestMalformed(t *testing.T) {
	salt, key := "c2FsdHNhbHRzYWx0c2FsdA", "a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2U"
	ok := "$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + key
	if _, err := cheap.Verify(ok, "x"); err != nil {
		t.Fatalf("the well-formed base case: %v", err)
	}
	for _, c := range []struct{ name, enc string }{
		{"empty", ""},
		{"argon2i", "$argon2i$v=19$m=64,t=1,p=1$" + salt + "$" + key},
		{"argon2d", "$argon2d$v=19$m=64,t=1,p=1$" + salt + "$" + key},
		{"version 16", "$argon2id$v=16$m=64,t=1,p=1$" + salt + "$" + key},
		{"no version", "$argon2id$m=64,t=1,p=1$" + salt + "$" + key},
		{"bcrypt", "$2b$12$R9h/cIPz0gi.URNNX3kh2OPST9/PgBkqquzi.Ss7KIUgO2t0jWMUW"},
		{"trailing field", ok + "$x"},
		{"leading text", "x" + ok},
		{"params reordered", "$argon2id$v=19$t=1,m=64,p=1$" + salt + "$" + key},
		{"extra param", "$argon2id$v=19$m=64,t=1,p=1,k=2$" + salt + "$" + key},
		{"missing param", "$argon2id$v=19$m=64,t=1$" + salt + "$" + key},
		{"memory too large", "$argon2id$v=19$m=262145,t=1,p=1$" + salt + "$" + key},
		{"memory 4 GiB", "$argon2id$v=19$m=4294967295,t=1,p=1$" + salt + "$" + key},
		{"memory overflows", "$argon2id$v=19$m=99999999999,t=1,p=1$" + salt + "$" + key},
		{"memory below 8×p", "$argon2id$v=19$m=15,t=1,p=2$" + salt + "$" + key},
		{"memory zero", "$argon2id$v=19$m=0,t=1,p=1$" + salt + "$" + key},
		{"time zero", "$argon2id$v=19$m=64,t=0,p=1$" + salt + "$" + key},
		{"time 11", "$argon2id$v=19$m=64,t=11,p=1$" + salt + "$" + key},
		{"time huge", "$argon2id$v=19$m=64,t=4294967295,p=1$" + salt + "$" + key},
		{"threads zero", "$argon2id$v=19$m=64,t=1,p=0$" + salt + "$" + key},
		{"threads 17", "$argon2id$v=19$m=256,t=1,p=17$" + salt + "$" + key},
		{"threads 256 (uint8 wrap)", "$argon2id$v=19$m=4096,t=1,p=256$" + salt + "$" + key},
		{"leading zero", "$argon2id$v=19$m=064,t=1,p=1$" + salt + "$" + key},
		{"plus sign", "$argon2id$v=19$m=+64,t=1,p=1$" + salt + "$" + key},
		{"minus sign", "$argon2id$v=19$m=-64,t=1,p=1$" + salt + "$" + key},
		{"space", "$argon2id$v=19$m=64, t=1,p=1$" + salt + "$" + key},
		{"salt short", "$argon2id$v=19$m=64,t=1,p=1$c2FsdA$" + key},
		{"salt long", "$argon2id$v=19$m=64,t=1,p=1$" + strings.Repeat("c2Fs", 22) + "$" + key},
		{"salt empty", "$argon2id$v=19$m=64,t=1,p=1$$" + key},
		{"key short", "$argon2id$v=19$m=64,t=1,p=1$" + salt + "$a2V5"},
		{"key long", "$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + strings.Repeat("a2V5", 22)},
		{"padded base64", "$argon2id$v=19$m=64,t=1,p=1$" + salt + "==$" + key},
		{"url base64", "$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + strings.ReplaceAll(key, "a", "-")},
		{"non-canonical base64", "$argon2id$v=19$m=64,t=1,p=1$" + salt[:21] + "B$" + key},
		{"newline in salt", "$argon2id$v=19$m=64,t=1,p=1$" + salt[:10] + "\n" + salt[10:] + "$" + key},
		{"carriage return in key", "$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + key[:10] + "\r" + key[10:]},
		{"too long", "$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + key + strings.Repeat("A", 300)},
	} {
		ok, err := cheap.Verify(c.enc, "x")
		if ok || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Verify(%q) = %v, %v; want false, ErrMalformed", c.name, c.enc, ok, err)
		}
	}
}

func TestHashRefusesBadParams(t *testing.T) {
	for _, p := range []Params{
		{Memory: MaxMemory + 1, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32},
		{Memory: 64, Time: 0, Threads: 1, SaltLen: 16, KeyLen: 32},
		{Memory: 64, Time: 1, Threads: 1, SaltLen: 4, KeyLen: 32},
		{Memory: 8, Time: 1, Threads: 2, SaltLen: 16, KeyLen: 32},
	} {
		if _, err := (Hasher{Params: p}).Hash("a password 123"); err == nil {
			t.Errorf("Hash with %+v: no error", p)
		}
	}
}

func TestCheckPolicy(t *testing.T) {
	for _, c := range []struct {
		pw   string
		want error
	}{
		{"", ErrTooShort},
		{"elevenchars", ErrTooShort},
		{"twelve chars", nil},
		{"ünïcødé€", nil}, // 8 characters, 15 bytes: bytes count
		{strings.Repeat("a", MaxLen), nil},
		{strings.Repeat("a", MaxLen+1), ErrTooLong},
	} {
		if err := CheckPolicy(c.pw); !errors.Is(err, c.want) {
			t.Errorf("CheckPolicy(%d bytes) = %v, want %v", len(c.pw), err, c.want)
		}
	}
}

// FuzzVerify feeds Verify arbitrary hashes: it never panics, accepts only what
// decode accepts, accepts only canonical strings, and never spends more than
// the bounds allow.
func FuzzVerify(f *testing.F) {
	good, _ := cheap.Hash("fuzz password 1")
	for _, s := range []string{
		good,
		"",
		"$argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHRzYWx0c2FsdA$a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2U",
		"$argon2id$v=19$m=262144,t=10,p=16$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5",
		"$argon2id$v=19$m=4294967295,t=4294967295,p=255$$",
		"$$$$$",
	} {
		f.Add(s, "fuzz password 1")
	}
	f.Fuzz(func(t *testing.T, enc, pw string) {
		p, salt, key, err := decode(enc)
		if err == nil {
			// Strict: what decodes is the one canonical form of its fields.
			canon := fmt.Sprintf("$argon2id$v=19$m=%d,t=%d,p=%d$%s$%s", p.Memory, p.Time, p.Threads,
				base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
			if canon != enc {
				t.Fatalf("decode accepted %q, whose canonical form is %q", enc, canon)
			}
		}
		if err == nil && (!p.valid() || p.Memory > 4096 || p.Time > 3) {
			// Valid but costly: parse only, so the fuzzer stays fast.
			return
		}
		ok, verr := cheap.Verify(enc, pw)
		if (err == nil) != (verr == nil) || (verr != nil && ok) {
			t.Fatalf("Verify(%q) = %v, %v; decode: %v", enc, ok, verr, err)
		}
	})
}
