import { InvalidGrantError, LeaseLostError } from "./errors.js";
import { formatTime, layoutProblem, maxNode } from "./layout.js";
import type { Grant, Lease } from "./wire.js";

/** The earliest expiry of ls, in Unix ms. */
export function minExpiry(ls: readonly Lease[]): number {
  let t = Infinity;
  for (const l of ls) if (l.expiresAtMs < t) t = l.expiresAtMs;
  return t;
}

/**
 * Checks an Alloc answer (DESIGN §4: fail fast) and sorts its leases by node ID:
 * the layout (layoutProblem), the number of node IDs asked for, each node ID inside
 * 0..2^nodeBits−1 and granted once, no lease already expired by the local wall
 * clock (now) nor before the answer arrived (the lease time counted from base, on
 * the monotonic clock, is past mono). Throws an InvalidGrantError. ignoreExpiry is
 * the conformance break of that name: it skips the check against mono.
 */
export function checkGrant(g: Grant, count: number, now: number, mono: number, base: number, ignoreExpiry = false): void {
  const layout = g.layout!;
  const why = layoutProblem(layout);
  if (why) throw new InvalidGrantError("layout", why);
  if (g.leases.length !== count) throw new InvalidGrantError("count", `asked for ${count} node IDs, granted ${g.leases.length}`);
  g.leases.sort((a, b) => a.nodeId - b.nodeId);
  const top = maxNode(layout);
  g.leases.forEach((l, i) => {
    if (l.nodeId < 0 || l.nodeId > top) {
      throw new InvalidGrantError("node-range", `node ID ${l.nodeId} is outside 0..${top} of a ${layout.nodeBits}-bit node field`);
    }
    if (i > 0 && g.leases[i - 1]!.nodeId === l.nodeId) throw new InvalidGrantError("duplicate", `node ID ${l.nodeId} granted twice`);
    if (now > l.expiresAtMs) {
      throw new InvalidGrantError(
        "expired-on-arrival",
        `the lease of node ID ${l.nodeId} expires at ${formatTime(l.expiresAtMs)}, already past by the local clock (${formatTime(now)}): the local clock is ahead of the server's by more than the lease`,
      );
    }
  });
  if (!ignoreExpiry && base + minExpiry(g.leases) - g.serverNowMs <= mono) {
    throw new InvalidGrantError("expired-on-arrival", "the lease ran out before the server's answer arrived");
  }
}

/**
 * The fatal error a well-formed Renew answer proves, or null: an empty list, other
 * or fewer node IDs than held (sorted by node ID), other fencing tokens, a lease
 * already expired by the local wall clock, or one that ran out (counted from base)
 * before the answer arrived. Sorts g.leases in place. ignoreExpiry is the
 * conformance break of that name.
 */
export function checkRenewed(held: Lease[], g: Grant, now: number, mono: number, base: number, ignoreExpiry: boolean): LeaseLostError | null {
  if (g.leases.length === 0) return new LeaseLostError("empty-renew", "Renew answered an empty list: the server holds no lease for this session");
  g.leases.sort((a, b) => a.nodeId - b.nodeId);
  const got = g.leases.map((l) => l.nodeId);
  const have = held.map((l) => l.nodeId);
  if (got.length !== have.length || got.some((n, i) => n !== have[i])) {
    return new LeaseLostError("count-mismatch", `Renew answered node IDs [${got}], the session holds [${have}]`);
  }
  for (let i = 0; i < held.length; i++) {
    const l = g.leases[i]!;
    if (l.fencingToken !== held[i]!.fencingToken) {
      return new LeaseLostError("lease-lost", `node ID ${l.nodeId} has fencing token ${l.fencingToken} at the server, ${held[i]!.fencingToken} here: it was granted again`);
    }
  }
  for (const l of g.leases) {
    if (now > l.expiresAtMs) {
      return new LeaseLostError("expired-on-arrival", `the renewed lease of node ID ${l.nodeId} expires at ${formatTime(l.expiresAtMs)}, already past by the local clock (${formatTime(now)})`);
    }
  }
  if (!ignoreExpiry && base + minExpiry(g.leases) - g.serverNowMs <= mono) {
    return new LeaseLostError("expired-on-arrival", "the renewed lease ran out before the server's answer arrived");
  }
  return null;
}
