// Package chaos is the fault-injection suite (issue #5): it starts real processes
// on loopback — a redis-server (or a Sentinel topology of a master, two replicas
// and three sentinels, for the failover scenarios of issue #15; a three-member
// etcd cluster, issue #17; a PostgreSQL primary with a streaming standby, which
// the replicas reach through one multi-host URL, for the failover scenarios of
// issue #32, postgres.go), two registry
// server replicas sharing it, and client processes (cmd/chaosclient) that embed
// the real client library and mint IDs as fast as their rate bound allows, each
// behind a TCP Proxy of its own — injects faults, and checks the histories the
// clients recorded.
//
// The checker (Check) proves, per run: (0) the histories are well-formed; (1) no
// two holders of one node ID overlap, (1a) in the timestamps they minted, (1b) in
// the windows they were granted, (1c) in the real time they held a valid lease;
// (2) no ID was minted twice; (3) every ID's timestamp lies in its holder's window;
// (4) fencing tokens grow with every new grant of a node ID; (5) after every fault
// heals, every live client holds a lease again within lease + grace + cleanup
// interval + slack; (6) every minted ID maps back to the session that minted it
// (origin.go); (7) a replica whose clock check failed exits with status 75, and
// no other replica process does (clock.go). Every ID is checked, none sampled:
// IDs of different node IDs never collide, so the IDs are bucketed by node ID and
// each bucket sorted.
//
// Negative controls (Controls) run a scenario with one safety mechanism switched
// off from outside the production code: the replicas run as cmd/chaosserver, the
// registry on a store wrapped by a control of package controls (a reset recovered
// without quarantine, a reclaim acting on a stale read), or the clients run
// chaosclient --control (minting with bare generators that ignore the lease
// window, requests sent without the requester's instance). Each must make the
// checker fail, or the checker proves nothing. No production package has a test
// switch or a build tag for them.
//
// go test runs the short mode (a few minutes). The long mode, for soak runs:
//
//	go test ./internal/harness/chaos -run 'TestChaos|TestSoak' -chaos.long -chaos.soak 20m -timeout 3h -v
//
// docs/reliability.md has the scenarios, the controls and the results.
package chaos
