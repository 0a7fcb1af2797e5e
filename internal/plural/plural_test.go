package plural_test

import (
	"testing"

	"github.com/idkeeper/idkeeper/internal/plural"
)

func TestN(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "0 API keys"}, {1, "1 API key"}, {2, "2 API keys"}, {-1, "-1 API key"}, {4096, "4096 API keys"}} {
		if got := plural.N(c.n, "API key", "API keys"); got != c.want {
			t.Errorf("N(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
