/**
 * Test-only: the rules a Session can be told to break, for the conformance suite's
 * negative controls (a scenario must fail with its break on). Not exported from the
 * package; only the driver sets one, and a Session breaks nothing by default.
 * @internal
 */
export type Break =
  | ""
  | "ignore-empty-renew" // keeps issuing after 200 + an empty list
  | "ignore-count-mismatch" // keeps issuing after a Renew with fewer or other node IDs
  | "ignore-expiry" // keeps issuing past the lease deadline
  | "deadline-from-receive" // the deadline counts from the answer's arrival, not the send time
  | "no-backoff" // Alloc retries at once
  | "remove-without-minted" // Remove without mintedUpTo
  | "remove-when-invalid" // Remove even after the lease became invalid
  // The optional breaks of the scenarios whose breakDrivers name "typescript":
  | "reuse-instance" // every session sends the same instance
  | "renew-late" // renew timers run half as long again (the renew at three quarters of the lease)
  | "renew-retry-fast" // the driver sets renewLoopMs and minRetryMs to 1 s
  | "no-receipts" // Renew without the receipts
  | "accept-bad-layout" // the server's layout is taken as 41/12/10, unchecked
  | "single-node" // the driver mints with the first node ID only
  | "first-replica-only"; // the driver passes the first server URL only

/** @internal */
export const breaks: readonly Break[] = [
  "",
  "ignore-empty-renew",
  "ignore-count-mismatch",
  "ignore-expiry",
  "deadline-from-receive",
  "no-backoff",
  "remove-without-minted",
  "remove-when-invalid",
  "reuse-instance",
  "renew-late",
  "renew-retry-fast",
  "no-receipts",
  "accept-bad-layout",
  "single-node",
  "first-replica-only",
];

/** @internal the Session property that holds its Break. */
export const breakRule: unique symbol = Symbol("idkeeper.breakRule");
