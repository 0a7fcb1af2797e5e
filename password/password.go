// Package password hashes the passwords of the admin web with Argon2id (RFC 9106)
// and checks them, and knows the common passwords a new one must not be
// (IsCommon, a list built into the binary). Hashes are PHC strings:
//
//	$argon2id$v=19$m=65536,t=3,p=4$<salt>$<key>
//
// with salt and key in unpadded standard base64. A Hasher satisfies
// account.PasswordHasher; its zero value is ready, with the strong defaults.
package password

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"

	"github.com/idkeeper/idkeeper/account"
)

// The default parameters: RFC 9106 §4's second recommended option (for systems
// that cannot spend 2 GiB per hash), which also meets OWASP's Password Storage
// Cheat Sheet (at least m=19 MiB, t=2, p=1): 64 MiB of memory, 3 passes, 4 lanes,
// a 16-byte random salt and a 32-byte key. One hash takes roughly 50–150 ms of one
// core per lane on current servers.
const (
	DefaultMemory  = 64 * 1024 // KiB
	DefaultTime    = 3
	DefaultThreads = 4
	DefaultSaltLen = 16
	DefaultKeyLen  = 32
)

// The bounds Verify accepts, so that a corrupt or hostile hash in the store cannot
// make a check allocate more than MaxMemory or run for minutes.
const (
	MaxMemory  = 256 * 1024 // KiB: 256 MiB, four times the default
	MaxTime    = 10
	MaxThreads = 16
	MinSaltLen = 8 // RFC 9106 §3.1
	MaxSaltLen = 64
	MinKeyLen  = 16
	MaxKeyLen  = 64
	// maxEncodedLen bounds the PHC string before it is parsed: the longest valid
	// one is well below it.
	maxEncodedLen = 256
)

// Bounds of a password, in bytes (CheckPolicy): the domain's.
const (
	MinLen = account.MinPasswordLen
	MaxLen = account.MaxPasswordLen
)

// MaxConcurrent is how many Argon2id computations a process runs at once; more
// wait. It bounds the memory that a burst of logins takes: MaxConcurrent × the
// memory parameter (256 MiB with the defaults).
const MaxConcurrent = 4

var slots = make(chan struct{}, MaxConcurrent)

// Errors.
var (
	// ErrMalformed: the encoded hash is not a PHC Argon2id string this package
	// accepts (another algorithm or version, parameters outside the bounds, bad
	// base64, trailing fields).
	ErrMalformed = errors.New("password: malformed argon2id hash")
	// ErrTooShort and ErrTooLong: CheckPolicy's refusals.
	ErrTooShort = fmt.Errorf("password: shorter than %d bytes", MinLen)
	ErrTooLong  = fmt.Errorf("password: longer than %d bytes", MaxLen)
)

// CheckPolicy returns nil when pw may become a password: MinLen..MaxLen bytes,
// the rule of account.CheckPassword. Length is the rule (NIST SP 800-63B
// §3.1.1.2 prefers length to composition rules; 12 is OWASP's floor for accounts
// without a second factor, and these accounts manage the keys of every service).
// The upper bound keeps forms and hashing bounded while admitting any passphrase
// or password manager's output. Any bytes are allowed: spaces, Unicode, symbols.
func CheckPolicy(pw string) error {
	switch {
	case len(pw) < MinLen:
		return ErrTooShort
	case len(pw) > MaxLen:
		return ErrTooLong
	}
	return nil
}

// Params are the cost parameters of a hash.
type Params struct {
	Memory  uint32 // KiB; at least 8 × Threads, at most MaxMemory
	Time    uint32 // passes: 1..MaxTime
	Threads uint8  // lanes: 1..MaxThreads
	SaltLen uint32 // bytes: MinSaltLen..MaxSaltLen
	KeyLen  uint32 // bytes: MinKeyLen..MaxKeyLen
}

var _ account.PasswordHasher = Hasher{}

// DefaultParams are the parameters of the zero Hasher.
var DefaultParams = Params{DefaultMemory, DefaultTime, DefaultThreads, DefaultSaltLen, DefaultKeyLen}

// valid reports whether p is within the bounds Verify accepts.
func (p Params) valid() bool {
	return p.Threads >= 1 && p.Threads <= MaxThreads &&
		p.Memory >= 8*uint32(p.Threads) && p.Memory <= MaxMemory &&
		p.Time >= 1 && p.Time <= MaxTime &&
		p.SaltLen >= MinSaltLen && p.SaltLen <= MaxSaltLen &&
		p.KeyLen >= MinKeyLen && p.KeyLen <= MaxKeyLen
}

// Hasher hashes and checks passwords. Its zero value uses DefaultParams; set Params
// for other costs (tests use cheap ones). It is safe for concurrent use.
type Hasher struct {
	Params Params // zero: DefaultParams
}

func (h Hasher) params() Params {
	if h.Params == (Params{}) {
		return DefaultParams
	}
	return h.Params
}

// Hash returns the PHC string of pw under a new random salt. It does not check
// the policy (CheckPolicy). It fails only when Params are outside the bounds
// Verify accepts, or the system's random source fails.
func (h Hasher) Hash(pw string) (string, error) {
	p := h.params()
	if !p.valid() {
		return "", fmt.Errorf("password: parameters %+v outside the bounds", p)
	}
	salt := make([]byte, p.SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("password: read a salt: %w", err)
	}
	key := derive(pw, salt, p)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.Memory, p.Time, p.Threads,
		b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// Verify reports whether pw is the password of encoded, comparing in constant
// time. The parameters are the encoded ones, whatever h's. It returns
// ErrMalformed, and false, when encoded does not parse or its parameters are
// outside the bounds.
func (h Hasher) Verify(encoded, pw string) (ok bool, err error) {
	p, salt, key, err := decode(encoded)
	if err != nil {
		return false, err
	}
	return subtle.ConstantTimeCompare(derive(pw, salt, p), key) == 1, nil
}

// NeedsRehash reports whether encoded was made with other parameters than h's
// (or does not parse): after a successful login the caller may store a new hash.
func (h Hasher) NeedsRehash(encoded string) bool {
	p, _, _, err := decode(encoded)
	return err != nil || p != h.params()
}

// Hash, Verify and NeedsRehash of the zero Hasher.
func Hash(pw string) (string, error)          { return Hasher{}.Hash(pw) }
func Verify(encoded, pw string) (bool, error) { return Hasher{}.Verify(encoded, pw) }
func NeedsRehash(encoded string) bool         { return Hasher{}.NeedsRehash(encoded) }

var b64 = base64.RawStdEncoding.Strict()

// derive runs Argon2id, at most MaxConcurrent at a time.
func derive(pw string, salt []byte, p Params) []byte {
	slots <- struct{}{}
	defer func() { <-slots }()
	return argon2.IDKey([]byte(pw), salt, p.Time, p.Memory, p.Threads, p.KeyLen)
}

// decode parses encoded strictly: exactly the fields Hash writes, in its order,
// decimal numbers without sign or leading zeros, canonical unpadded base64, every
// parameter within bounds.
func decode(encoded string) (p Params, salt, key []byte, err error) {
	if len(encoded) > maxEncodedLen {
		return p, nil, nil, ErrMalformed
	}
	f := strings.Split(encoded, "$")
	if len(f) != 6 || f[0] != "" || f[1] != "argon2id" || f[2] != "v=19" {
		return p, nil, nil, ErrMalformed
	}
	kv := strings.Split(f[3], ",")
	if len(kv) != 3 {
		return p, nil, nil, ErrMalformed
	}
	m, ok1 := number(kv[0], "m=", MaxMemory)
	t, ok2 := number(kv[1], "t=", MaxTime)
	th, ok3 := number(kv[2], "p=", MaxThreads)
	if !ok1 || !ok2 || !ok3 {
		return p, nil, nil, ErrMalformed
	}
	if salt, err = unb64(f[4]); err != nil {
		return p, nil, nil, ErrMalformed
	}
	if key, err = unb64(f[5]); err != nil {
		return p, nil, nil, ErrMalformed
	}
	p = Params{Memory: m, Time: t, Threads: uint8(th), SaltLen: uint32(len(salt)), KeyLen: uint32(len(key))}
	if !p.valid() {
		return Params{}, nil, nil, ErrMalformed
	}
	return p, salt, key, nil
}

// unb64 decodes canonical unpadded standard base64. encoding/base64 skips '\r'
// and '\n' anywhere in its input; unb64 refuses them, like any byte outside the
// alphabet.
func unb64(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, ErrMalformed
	}
	return b64.DecodeString(s)
}

// number parses s = prefix + a decimal number in 1..max without sign or leading
// zeros.
func number(s, prefix string, max uint32) (uint32, bool) {
	d, ok := strings.CutPrefix(s, prefix)
	if !ok || d == "" || len(d) > 10 || d[0] == '0' {
		return 0, false
	}
	for _, c := range []byte(d) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(d, 10, 32)
	if err != nil || n > uint64(max) {
		return 0, false
	}
	return uint32(n), true
}
