package clientip

import "testing"

// ParsePrefix takes a CIDR prefix (masked) or a bare address (a /32 or /128,
// IPv4-in-IPv6 as IPv4, the zone dropped).
func TestParsePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.1.2.3/8": "10.0.0.0/8", "192.0.2.7": "192.0.2.7/32", "::ffff:192.0.2.7": "192.0.2.7/32",
		"2001:db8::1/32": "2001:db8::/32", "fe80::1%eth0": "fe80::1/128",
	} {
		p, err := ParsePrefix(in)
		if err != nil || p.String() != want {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, bad := range []string{"", "10.0.0.0/33", "host.example", "1.2.3", "10.0.0.0/8/8"} {
		if p, err := ParsePrefix(bad); err == nil {
			t.Errorf("ParsePrefix(%q) = %v", bad, p)
		}
	}
}
