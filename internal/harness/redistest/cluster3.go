package redistest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// clusterTimeout bounds redis-cli --cluster create and the wait for every node
// to see the cluster ok.
const clusterTimeout = 30 * time.Second

// Cluster is a Redis Cluster of three masters (no replicas) owned by one test,
// each a Server with cluster-enabled yes on its own free loopback port (and bus
// port), the slots shared out by redis-cli --cluster create.
type Cluster struct {
	nodes    []*Server
	password string
}

// withJoin makes a cluster node that claims no slot: StartCluster3 has
// redis-cli share them out.
func withJoin() Option { return func(c *config) { c.cluster, c.join = true, true } }

// StartCluster3 starts three cluster-enabled redis-servers, joins them with
// `redis-cli --cluster create … --cluster-replicas 0 --cluster-yes` and returns
// once CLUSTER INFO says cluster_state:ok, three known nodes and every slot ok
// on each of them. opts apply to every node: WithAOF or WithAOFEverySec,
// WithPassword (requirepass and masterauth; redis-cli gets it through
// REDISCLI_AUTH). It calls t.Fatalf, never t.Skip, when redis-cli is missing
// or the cluster does not form. The nodes are killed in t.Cleanup.
func StartCluster3(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redistest: redis-cli not found on PATH (install redis-tools or redis-server): %v", err)
	}
	opts = append(append([]Option(nil), opts...), withJoin())
	c := &Cluster{}
	for i := 0; i < 3; i++ {
		c.nodes = append(c.nodes, Start(t, opts...))
	}
	c.password = c.nodes[0].cfg.password

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.Env = os.Environ()
	if c.password != "" {
		cmd.Env = append(cmd.Env, "REDISCLI_AUTH="+c.password)
	}
	cmd.SysProcAttr = sysProcAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s\n%s", strings.Join(args, " "), err, tail(string(out)), c.logs())
	}

	deadline := time.Now().Add(clusterTimeout)
	for {
		err := c.ok()
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: the cluster did not become ok within %v: %v\n%s", clusterTimeout, err, c.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ok reports nil when every node's CLUSTER INFO says the cluster is ok with
// three known nodes and every slot served.
func (c *Cluster) ok() error {
	for _, n := range c.nodes {
		info, err := doString(n.Addr(), c.password, "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %w", n.Addr(), err)
		}
		state, known, slots := infoField(info, "cluster_state"), infoField(info, "cluster_known_nodes"), infoField(info, "cluster_slots_ok")
		if state != "ok" || known != "3" || slots != "16384" {
			return fmt.Errorf("%s: cluster_state:%s cluster_known_nodes:%s cluster_slots_ok:%s",
				n.Addr(), state, known, slots)
		}
	}
	return nil
}

// Addrs are the nodes' host:port addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes are the three masters.
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

// Password is the nodes' password (WithPassword), "" without one.
func (c *Cluster) Password() string { return c.password }

// URL is the cluster in IdKeeper's redis+cluster form, go-redis's
// ParseClusterURL form under a scheme of its own: the first node as the host
// with the password as the user info's, the others as addr parameters:
//
//	redis+cluster://[:PW@]127.0.0.1:P1?addr=127.0.0.1:P2&addr=127.0.0.1:P3
func (c *Cluster) URL() string {
	addrs := c.Addrs()
	var b strings.Builder
	b.WriteString("redis+cluster://")
	if c.password != "" {
		b.WriteString(url.UserPassword("", c.password).String() + "@")
	}
	b.WriteString(addrs[0])
	for i, a := range addrs[1:] {
		if i == 0 {
			b.WriteString("?")
		} else {
			b.WriteString("&")
		}
		b.WriteString("addr=" + a)
	}
	return b.String()
}

// logs is every node's log tail, for a failure message.
func (c *Cluster) logs() string {
	var b strings.Builder
	for _, n := range c.nodes {
		n.mu.Lock()
		if n.proc != nil {
			fmt.Fprintf(&b, "--- node %s:\n%s\n", n.Addr(), logTail(n.proc.out))
		}
		n.mu.Unlock()
	}
	return b.String()
}

// tail is the end of s, for a failure message.
func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}
