package clockcheck

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The golden vectors in testdata/vectors.json were derived from DESIGN §8 alone,
// with Python's standard library, by testdata/vectors.py:
//
//	python3 testdata/vectors.py > testdata/vectors.json
//
// whose core is
//
//	m   = b"TCKCLK\x00" + struct.pack(">H", 2) + nonce + struct.pack(">QQBQ", ref, unc, synced, age)
//	mac = hmac.new(secret, m, hashlib.sha256).digest()
//	b64 = base64.urlsafe_b64encode(x).rstrip(b"=")
//
// The first vector's MAC was checked once more with OpenSSL:
//
//	echo 54434b434c4b000002000102030405060708090a0b0c0d0e0f0000019b76daa87b000000000000000c010000000000000d80 |
//	  xxd -r -p | openssl dgst -sha256 -mac HMAC -macopt key:0123456789abcdefghijklmnopqrstuv
//	SHA2-256(stdin)= c58267260fb05f87aec276b34740844d736d8fff8d0cc0433c2b5383dfd2316a
type vector struct {
	Name            string `json:"name"`
	SecretHex       string `json:"secret_hex"`
	NonceHex        string `json:"nonce_hex"`
	ReferenceUnixMs string `json:"reference_unix_ms"`
	UncertaintyMs   string `json:"uncertainty_ms"`
	Synced          bool   `json:"synced"`
	SourceAgeMs     string `json:"source_age_ms"`
	MACInputHex     string `json:"mac_input_hex"`
	MACHex          string `json:"mac_hex"`
	RequestLine     string `json:"request_line"`
	ResponseLine    string `json:"response_line"`
}

func loadVectors(t testing.TB) []vector {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) < 3 {
		t.Fatalf("%d vectors", len(vs))
	}
	return vs
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustUint(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestGoldenVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			secret := mustHex(t, v.SecretHex)
			var r Response
			copy(r.Nonce[:], mustHex(t, v.NonceHex))
			r.ReferenceUnixMs, r.UncertaintyMs = mustUint(t, v.ReferenceUnixMs), mustUint(t, v.UncertaintyMs)
			r.Synced, r.SourceAgeMs = v.Synced, mustUint(t, v.SourceAgeMs)

			if got := (Request{Nonce: r.Nonce}).AppendLine(nil); string(got) != v.RequestLine {
				t.Errorf("request line %q, want %q", got, v.RequestLine)
			}
			if mac := r.MAC(secret); hex.EncodeToString(mac[:]) != v.MACHex {
				t.Errorf("MAC %x, want %s", mac, v.MACHex)
			}
			if got := r.AppendLine(nil, secret); string(got) != v.ResponseLine {
				t.Errorf("response line %q, want %q", got, v.ResponseLine)
			}
			req, err := ParseRequest([]byte(strings.TrimSuffix(v.RequestLine, "\n")))
			if err != nil || req.Nonce != r.Nonce {
				t.Errorf("ParseRequest: %+v, %v", req, err)
			}
			got, err := ParseResponse([]byte(strings.TrimSuffix(v.ResponseLine, "\n")), secret, r.Nonce)
			if err != nil || got != r {
				t.Errorf("ParseResponse: %+v, %v; want %+v", got, err, r)
			}
		})
	}
}

// TestMACInput checks the 50-byte MAC layout itself against the vectors.
func TestMACInput(t *testing.T) {
	for _, v := range loadVectors(t) {
		in := mustHex(t, v.MACInputHex)
		if len(in) != 50 || !bytes.HasPrefix(in, []byte("TCKCLK\x00\x00\x02")) {
			t.Fatalf("%s: MAC input %x", v.Name, in)
		}
		var r Response
		copy(r.Nonce[:], in[9:25])
		r.ReferenceUnixMs, r.UncertaintyMs = mustUint(t, v.ReferenceUnixMs), mustUint(t, v.UncertaintyMs)
		r.Synced, r.SourceAgeMs = in[41] == 1, mustUint(t, v.SourceAgeMs)
		if mac := r.MAC(mustHex(t, v.SecretHex)); hex.EncodeToString(mac[:]) != v.MACHex {
			t.Errorf("%s: MAC %x, want %s", v.Name, mac, v.MACHex)
		}
	}
}

func TestNewRequestIsFresh(t *testing.T) {
	a, b := NewRequest(), NewRequest()
	if a.Nonce == b.Nonce || a.Nonce == ([16]byte{}) {
		t.Fatalf("nonces %x %x", a.Nonce, b.Nonce)
	}
	line := a.AppendLine(nil)
	if len(line) != 32 || line[31] != '\n' {
		t.Fatalf("line %q", line)
	}
}

func TestParseRequestRejects(t *testing.T) {
	good := "TCKCLK 2 AAECAwQFBgcICQoLDA0ODw"
	cases := []struct {
		line string
		want Reason
	}{
		{"", ReasonFormat},
		{"TCKCLK", ReasonFormat},
		{"TCKCLK ", ReasonFormat},
		{"tckclk 2 AAECAwQFBgcICQoLDA0ODw", ReasonFormat},
		{"TCKCLK 1 AAECAwQFBgcICQoLDA0ODw", ReasonVersion},
		{"TCKCLK 3", ReasonVersion},
		{"TCKCLK 02 AAECAwQFBgcICQoLDA0ODw", ReasonFormat},
		{"TCKCLK +2 AAECAwQFBgcICQoLDA0ODw", ReasonFormat},
		{"TCKCLK  2 AAECAwQFBgcICQoLDA0ODw", ReasonFormat},
		{"TCKCLK 2  AAECAwQFBgcICQoLDA0ODw", ReasonFormat},
		{good + " ", ReasonFormat},
		{" " + good, ReasonFormat},
		{good + "\r", ReasonFormat},
		{"TCKCLK\t2 AAECAwQFBgcICQoLDA0ODw", ReasonFormat},
		{"TCKCLK 2 AAECAwQFBgcICQoLDA0ODx", ReasonFormat},   // trailing bits not zero
		{"TCKCLK 2 AAECAwQFBgcICQoLDA0ODw==", ReasonFormat}, // padding
		{"TCKCLK 2 AAECAwQFBgcICQoLDA0OD", ReasonFormat},    // short
		{"TCKCLK 2 AAECAwQFBgcICQoLDA0ODwA", ReasonFormat},  // long
		{"TCKCLK 2 AAECAwQFBgcICQoLDA0O+w", ReasonFormat},   // standard, not URL, alphabet
		{"TCKCLK 2 AAECAwQFBgcICQoLDA0\r\nODw", ReasonFormat},
		{"TCKCLK 2 AAECAwQFBgcICQoLDA\r\n0O", ReasonFormat},
		{good + strings.Repeat("x", MaxLine), ReasonSize},
	}
	if _, err := ParseRequest([]byte(good)); err != nil {
		t.Fatalf("good: %v", err)
	}
	for _, c := range cases {
		_, err := ParseRequest([]byte(c.line))
		if ReasonOf(err) != c.want {
			t.Errorf("ParseRequest(%q) = %v, want reason %s", c.line, err, c.want)
		}
	}
}

func TestParseResponseRejects(t *testing.T) {
	v := loadVectors(t)[0]
	secret := mustHex(t, v.SecretHex)
	var nonce [16]byte
	copy(nonce[:], mustHex(t, v.NonceHex))
	good := strings.TrimSuffix(v.ResponseLine, "\n")
	f := strings.Split(good, " ")
	with := func(i int, s string) string {
		g := append([]string(nil), f...)
		g[i] = s
		return strings.Join(g, " ")
	}
	flipped := []byte(good)
	flipped[len(flipped)-5] = flipLetter(flipped[len(flipped)-5]) // a wrong MAC, canonical still
	other := nonce
	other[0] ^= 1
	cases := []struct {
		name, line string
		secret     []byte
		want       Reason
	}{
		{"leading zero reference", with(3, "0"+f[3]), secret, ReasonFormat},
		{"leading zero uncertainty", with(4, "012"), secret, ReasonFormat},
		{"leading zero age", with(6, "03456"), secret, ReasonFormat},
		{"plus sign", with(4, "+12"), secret, ReasonFormat},
		{"minus sign", with(4, "-12"), secret, ReasonFormat},
		{"over uint64", with(3, "18446744073709551616"), secret, ReasonFormat},
		{"21 digits", with(3, "100000000000000000000"), secret, ReasonFormat},
		{"synced 2", with(5, "2"), secret, ReasonFormat},
		{"synced 01", with(5, "01"), secret, ReasonFormat},
		{"synced true", with(5, "true"), secret, ReasonFormat},
		{"mac padded", with(7, f[7]+"="), secret, ReasonFormat},
		{"mac short", with(7, f[7][:42]), secret, ReasonFormat},
		{"mac trailing bits", with(7, f[7][:42]+"p"), secret, ReasonFormat},
		{"mac with LF", with(7, f[7][:41]+"\n"+f[7][41:]), secret, ReasonFormat},
		{"extra field", good + " 0", secret, ReasonFormat},
		{"missing field", strings.Join(f[:7], " "), secret, ReasonFormat},
		{"double space", strings.Replace(good, " 12 ", "  12 ", 1), secret, ReasonFormat},
		{"trailing CR", good + "\r", secret, ReasonFormat},
		{"version 1", with(1, "1"), secret, ReasonVersion},
		{"version 3 other layout", "TCKCLK 3 x", secret, ReasonVersion},
		{"version 02", with(1, "02"), secret, ReasonFormat},
		{"magic", with(0, "TCKCLk"), secret, ReasonFormat},
		{"oversized", good + strings.Repeat(" ", MaxLine), secret, ReasonSize},
		{"nonce", with(2, base64Nonce(other)), secret, ReasonNonce},
		{"mac flipped", string(flipped), secret, ReasonMAC},
		{"wrong secret", good, bytes.Repeat([]byte{'k'}, 32), ReasonMAC},
		{"short secret", good, secret[:31], ReasonMAC},
		{"field changed", with(4, "13"), secret, ReasonMAC},
	}
	for _, c := range cases {
		_, err := ParseResponse([]byte(c.line), c.secret, nonce)
		if ReasonOf(err) != c.want {
			t.Errorf("%s: ParseResponse(%q) = %v, want reason %s", c.name, c.line, err, c.want)
		}
	}
	// Exactly MaxLine bytes is allowed (then judged on its syntax), one more is not.
	if _, err := ParseResponse([]byte(good+strings.Repeat("x", MaxLine-len(good))), secret, nonce); ReasonOf(err) != ReasonFormat {
		t.Errorf("MaxLine bytes: %v", err)
	}
	if _, err := ParseResponse([]byte(good+strings.Repeat("x", MaxLine+1-len(good))), secret, nonce); ReasonOf(err) != ReasonSize {
		t.Errorf("MaxLine+1 bytes: %v", err)
	}
}

// flipLetter returns another base64url letter than c.
func flipLetter(c byte) byte {
	if c == 'A' {
		return 'B'
	}
	return 'A'
}

func base64Nonce(n [16]byte) string { return b64.EncodeToString(n[:]) }

func TestFailureError(t *testing.T) {
	f := fail(ReasonMAC, "bad")
	if f.Error() != "clock check failed (mac): bad" || ReasonOf(f) != ReasonMAC || ReasonOf(nil) != "" {
		t.Fatal(f)
	}
	if len(Reasons) != 12 {
		t.Fatal(Reasons)
	}
}

func FuzzParseRequest(f *testing.F) {
	for _, v := range loadVectors(f) {
		f.Add([]byte(strings.TrimSuffix(v.RequestLine, "\n")))
	}
	f.Add([]byte("TCKCLK 2 AAECAwQFBgcICQoLDA0ODx"))
	f.Add([]byte("TCKCLK 18446744073709551618 x"))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseRequest(line)
		if err != nil {
			if ReasonOf(err) == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		if got := r.AppendLine(nil); !bytes.Equal(got, append(line, '\n')) {
			t.Fatalf("%q parsed, re-encodes as %q", line, got)
		}
	})
}

// fuzzSecret is the secret of FuzzParseResponse; the seeds carry valid MACs under it.
var fuzzSecret = []byte("fuzz-secret-fuzz-secret-fuzz-sec")

func FuzzParseResponse(f *testing.F) {
	for _, v := range loadVectors(f) {
		f.Add([]byte(strings.TrimSuffix(v.ResponseLine, "\n")))
	}
	seed := Response{ReferenceUnixMs: 1767225600123, UncertaintyMs: 7, Synced: true, SourceAgeMs: 64000}
	copy(seed.Nonce[:], "0123456789abcdef")
	f.Add(bytes.TrimSuffix(seed.AppendLine(nil, fuzzSecret), []byte("\n")))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, mac, err := parseResponseSyntax(line)
		if err != nil {
			if ReasonOf(err) == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			if _, err2 := ParseResponse(line, fuzzSecret, r.Nonce); err2 == nil {
				t.Fatalf("%q: syntax error %v, yet ParseResponse accepts it", line, err)
			}
			return
		}
		if got := r.appendLine(nil, mac); !bytes.Equal(got, append(line, '\n')) {
			t.Fatalf("%q parsed, re-encodes as %q", line, got)
		}
		// With the nonce it echoes, the line is accepted exactly when its MAC is right.
		got, err := ParseResponse(line, fuzzSecret, r.Nonce)
		if want := r.MAC(fuzzSecret); (err == nil) != (want == mac) {
			t.Fatalf("%q: ParseResponse %v, MAC right: %v", line, err, want == mac)
		}
		if err == nil && !bytes.Equal(got.AppendLine(nil, fuzzSecret), append(line, '\n')) {
			t.Fatalf("%q accepted, re-encodes otherwise", line)
		}
	})
}
