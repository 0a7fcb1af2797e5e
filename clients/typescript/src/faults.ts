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
  | "remove-when-invalid"; // Remove even after the lease became invalid

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
];

/** @internal the Session property that holds its Break. */
export const breakRule: unique symbol = Symbol("idkeeper.breakRule");
