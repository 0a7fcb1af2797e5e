package redis

import (
	"errors"
	"fmt"
	neturl "net/url"
	"slices"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// The URL forms Open dials (DESIGN §11), each also with the TLS scheme rediss:
//
//	redis://[[USER]:PASSWORD@]HOST:PORT/DB                       one server
//	redis+sentinel://[[USER]:SENTINEL_PASSWORD@]SENTINEL:PORT/DB?master_name=NAME&addr=SENTINEL2:PORT…[&password=…]
//	redis+cluster://[[USER]:PASSWORD@]NODE:PORT?addr=NODE2:PORT…
//
// They are go-redis's own forms (ParseURL, ParseFailoverURL, ParseClusterURL):
// behind Sentinel the user info is the sentinels' credentials and the data
// nodes' come from the username and password query parameters; every other
// query parameter is an option of the client (dial_timeout=3s, …), and an
// unknown one is an error.

// Schemes of the URL forms Open dials.
var Schemes = []string{"redis://", "rediss://", "redis+sentinel://", "rediss+sentinel://", "redis+cluster://", "rediss+cluster://"}

// IsURL reports whether s is a URL of one of the forms Open dials.
func IsURL(s string) bool {
	for _, p := range Schemes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// dial returns a client for url, owned by the caller: a *goredis.Client for one
// server or Sentinel (a failover client, which follows the master the sentinels
// name), a *goredis.ClusterClient for a cluster. Its errors never hold the URL,
// whose passwords they would show.
func dial(url string) (goredis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok || !IsURL(url) {
		return nil, fmt.Errorf("redis: URL must start with one of %s", strings.Join(Schemes, ", "))
	}
	base, topology, _ := strings.Cut(scheme, "+")
	plain := base + "://" + rest
	switch topology {
	case "":
		o, err := goredis.ParseURL(plain)
		if err != nil {
			return nil, badURL(err)
		}
		o.ContextTimeoutEnabled = true
		return goredis.NewClient(o), nil
	case "sentinel":
		o, err := goredis.ParseFailoverURL(plain)
		if err != nil {
			return nil, badURL(err)
		}
		if o.MasterName == "" {
			return nil, errors.New("redis: bad URL: a redis+sentinel URL needs master_name=NAME")
		}
		o.ContextTimeoutEnabled = true
		return goredis.NewFailoverClient(o), nil
	default: // cluster
		o, err := goredis.ParseClusterURL(plain)
		if err != nil {
			return nil, badURL(err)
		}
		o.ContextTimeoutEnabled = true
		return goredis.NewClusterClient(o), nil
	}
}

// urlIdentity is Store.Identity's address part for a URL that dial accepted.
func urlIdentity(url string) string {
	scheme, rest, _ := strings.Cut(url, "://")
	base, topology, _ := strings.Cut(scheme, "+")
	plain := base + "://" + rest
	switch topology {
	case "":
		if o, err := goredis.ParseURL(plain); err == nil {
			return fmt.Sprintf("redis://%s/%d", o.Addr, o.DB)
		}
	case "sentinel":
		if o, err := goredis.ParseFailoverURL(plain); err == nil {
			return fmt.Sprintf("redis+sentinel://%s/%d?master_name=%s", sortedAddrs(o.SentinelAddrs), o.DB, o.MasterName)
		}
	default:
		if o, err := goredis.ParseClusterURL(plain); err == nil {
			return "redis+cluster://" + sortedAddrs(o.Addrs)
		}
	}
	return "redis://(unparsed)"
}

// clientIdentity is Store.Identity's address part for a client given in Options.
func clientIdentity(c goredis.UniversalClient) string {
	switch c := c.(type) {
	case *goredis.ClusterClient:
		return "redis+cluster://" + sortedAddrs(c.Options().Addrs)
	case *goredis.Client:
		return fmt.Sprintf("redis://%s/%d", c.Options().Addr, c.Options().DB)
	}
	return fmt.Sprintf("redis://(%T)", c)
}

func sortedAddrs(addrs []string) string {
	s := slices.Clone(addrs)
	slices.Sort(s)
	return strings.Join(slices.Compact(s), ",")
}

// badURL wraps a parse error without the URL a *url.Error repeats.
func badURL(err error) error {
	var ue *neturl.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("redis: bad URL: %w", err)
}

// RedactURL returns url with every password hidden: the user info's and the
// password and sentinel_password query parameters. A URL that does not parse
// shows nothing of itself.
func RedactURL(url string) string {
	u, err := neturl.Parse(url)
	if err != nil {
		return "(a URL that does not parse)"
	}
	q := u.Query()
	for _, k := range []string{"password", "sentinel_password"} {
		if q.Has(k) {
			q.Set(k, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return u.Redacted()
}
