package redis

import (
	"regexp"
	"strings"
	"testing"
)

// Scripts carry only the helpers they use, and every helper they use: a helper
// missing would fail at run time ("nonexistent global variable").
func TestAssembleTakesWhatIsUsed(t *testing.T) {
	defs := regexp.MustCompile(`(?m)^local function ([A-Za-z_][A-Za-z0-9_]*)\(`)
	_, all := parseHelpers("lease", lua("lease"))
	_, common := parseHelpers("common", lua("common"))
	all = append(common, all...)
	for _, c := range []struct {
		body          string
		want, notWant []string
	}{
		{lua("alloc"), []string{"guard", "clock", "int", "promote", "owned", "requester_entry", "index_leases", "push2", "chunked"},
			[]string{"add_nodes", "generation", "old_layout", "parse_lease", "get_lease", "free_many", "place"}},
		{lua("remove"), []string{"guard", "owned", "free_many", "key_held", "hist_end", "hist_id"},
			[]string{"promote", "index_leases", "parse_lease", "hist_claim", "hist_fields"}},
		{lua("alloc"), []string{"hist_id", "hist_start", "hist_start16", "hist_tail", "extend_leases"},
			[]string{"hist_claim", "hist_end", "hist_delete"}},
		{lua("renew"), []string{"hist_claim", "hist_end", "extend_leases"}, []string{"hist_delete", "promote"}},
		{lua("history_at"), []string{"hist_start16", "push2"}, []string{"guard", "hist_end", "hist_claim"}},
		{lua("history_prune"), []string{"hist_delete", "hist_start", "chunked"}, []string{"guard", "hist_end"}},
		{lua("init"), []string{"add_nodes", "place", "generation", "old_layout"}, []string{"guard", "promote"}},
		{lua("counts"), []string{"clock", "num", "int"}, []string{"guard", "chunked"}},
		{lua("revoke"), []string{"guard", "parse_lease", "watermark", "quarantined_until", "free_many", "key_held", "drop_requester_nodes"},
			[]string{"promote", "index_leases", "extend_leases", "owned"}},
	} {
		src := assemble(c.body, "common", "lease")
		got := map[string]bool{}
		for _, m := range defs.FindAllStringSubmatch(src, -1) {
			got[m[1]] = true
		}
		for _, n := range c.want {
			if !got[n] {
				t.Errorf("script %.40q lacks helper %s", c.body, n)
			}
		}
		for _, n := range c.notWant {
			if got[n] {
				t.Errorf("script %.40q carries helper %s it does not use", c.body, n)
			}
		}
		// Every helper the script calls is defined in it.
		for _, f := range all {
			if !got[f.name] && regexp.MustCompile(`\b`+f.name+`\(`).MatchString(code(strings.Replace(src, "local function", "", -1))) {
				t.Errorf("script %.40q calls %s without defining it", c.body, f.name)
			}
		}
	}
	if src := assemble(lua("now"), "common"); strings.Contains(src, "local function int(") {
		t.Errorf("the now script carries int:\n%s", src)
	}
}
