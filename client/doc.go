// Package client embeds IdKeeper in a Go program: a Session leases node IDs from
// the registry and mints 64-bit Snowflake IDs locally with them, with no network
// hop per ID (DESIGN §4).
//
//	s, err := client.Start(ctx, client.Config{
//		ServerURL: "http://idkeeper:8080",
//		APIKey:    os.Getenv("IDKEEPER_API_KEY"),
//		Count:     2, // node IDs: about 1,024,000 IDs/s each
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer s.Close() // drains the calls in flight, then gives the node IDs back
//
//	id, err := s.NextID()              // round robin over the node IDs
//	err = s.NextIDs(batch)             // ascending, all or nothing
//	w := s.Generator(i)                // pin one node ID to worker i
//	http.HandleFunc("/health", ...)    // serve s.Check(): green exactly when issuing works
//
// # Lease lifecycle
//
// Open (or Start) sends Alloc with the session's identity — this process's
// (ProcessRequester: machine ID, PID, process start time) plus a random instance
// the session draws for itself and never reuses (DESIGN §3), so that two
// sessions, of one process or of two containers of one image, are never taken for
// one — and retries with exponential backoff (3 s, ×2, ±20 % jitter, capped after
// the jitter: no wait over 60 s) while the answer may change: transport errors, timeouts, 5xx (the registry
// waiting for `idkeeper init` or recovering a reset store among them), 408, 429,
// 409 CLOCK_SKEW_TOO_LARGE (the server's reason is logged verbatim; the session
// starts by itself once NTP has fixed the clock), 409 NODE_IDS_EXHAUSTED and 409
// API_KEY_QUOTA_EXCEEDED. Other refusals (401, 403 LEASE_NOT_OWNED, …) and a grant
// that fails validation (layout widths, node ID range, a lease already expired by
// the local clock) end Open with an error at once. Open then renews once at once,
// to prove the renew path.
//
// The session renews at half the lease. A failed renew (transport error, timeout,
// any non-200 status, malformed answer) is retried after min(RenewLoopDuration,
// time left / 4), at least 5 s. A well-formed answer that shows the lease gone (an
// empty list, fewer or other node IDs or fencing tokens) or already expired is fatal.
// Every Alloc and Renew carries clientUtcNow, so the server measures clock skew.
// Every Renew also carries the leases' receipts (Lease.Receipt), the registry's
// signed statements of them: when the registry's store lost its data, they let it
// restore the session's leases instead of answering that it holds nothing, and the
// session mints on (a restored lease's window may start later, never earlier).
//
// The lease is valid until a deadline on the monotonic clock: the send time of the
// last successful Alloc or Renew plus the lease time granted (expiresAt −
// serverUtcNow). Every issuing call checks it after minting, so issuing stops at the
// deadline even if no goroutine of the session gets to run. Losing the lease ends
// the session: issuing fails with ErrLeaseLost, Done is closed, Err tells why, and
// Config.OnFatal is called (by default it logs and exits the process, because a
// service that cannot mint IDs should be restarted by its supervisor).
//
// Close blocks new issuing, waits for the calls in flight, stops renewing, and then
// sends Remove with mintedUpTo, the highest timestamp minted, so that the registry
// can hand the node IDs to the next process at once. When the lease is already
// invalid it sends nothing; a failed Remove is logged, not fatal.
//
// # Several registry replicas
//
// Config.ServerURLs names the replicas of one registry deployment (one shared
// store) instead of one ServerURL behind a load balancer. Each Alloc, Renew and
// Remove goes to the replica that answered last and moves to the next one, each
// replica once per call, on a transport error or a 5xx answer; never on a 4xx,
// which is the registry's verdict. A retried Alloc carries the session's requester,
// so a grant whose answer was lost is answered again with the same lease, never a
// second one; a Renew or Remove is the same request again. The lease deadline
// counts from the call's first send, whichever replica answered. Stats.Replicas
// and Stats.Failovers count what happened.
//
// # Uniqueness
//
// Each generator mints only timestamps inside its lease's window, NotBefore …
// ExpiresAt, as granted by the server. The server starts a node's next window after
// the latest expiry it ever granted for it, so even two processes that hold the
// same node ID at overlapping real times (a paused VM, a partition, a clock step)
// never mint the same ID; they can only lose availability. A newly granted node ID
// may still be cooling (its previous holder ended without mintedUpTo, or a store
// reset raised its watermark): issuing then fails with snowflake.ErrBeforeWindow,
// Check is red with a *CoolingError that says until when, and the session logs it
// at warn level once per lease. A wall clock that steps back keeps minting at the last
// timestamp for up to Config.MaxBackwardStep, then fails with
// snowflake.ErrClockBackwards; a used-up millisecond waits for the next one.
//
// # Observability and tests
//
// Session.Stats snapshots IDs minted, exhausted sequences, clock-backward refusals,
// the generators' own histograms (backward steps of the wall clock with their width
// and duration, waits for a later millisecond), lease time left and health; package
// clientmetrics exports them to Prometheus, so that a program importing only this
// package compiles neither Prometheus nor protobuf. A backward step of the wall
// clock logs two warnings, however many calls it affects: its width when found, its
// duration when the clock has caught up. Package clienttest has a fake Clock that moves only when told, so lease
// lifecycles of days run in a test in milliseconds.
package client
