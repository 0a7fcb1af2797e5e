/**
 * The errors of the client. Every error it throws or rejects with is an
 * {@link IdKeeperError} with a stable `code`; a {@link ServerError} is an answer of
 * the registry other than 200, and carries the problem+json code the server sent.
 */

/** Codes of the errors the client makes itself (a ServerError carries the server's). */
export type ClientCode =
  | "NOT_OPEN" // open() has not obtained a lease yet
  | "CLOSED" // close() was called
  | "LEASE_LOST" // the lease ended for good: see LeaseLostError.reason
  | "INVALID_GRANT" // the Alloc answer failed the client's checks: see InvalidGrantError.reason
  | "BEFORE_WINDOW" // the node ID's window has not opened yet (it is cooling)
  | "WINDOW_ENDED" // the wall clock is past the lease's expiresAt
  | "CLOCK_BACKWARDS" // the wall clock is behind the last ID by more than maxBackwardStepMs
  | "CLOCK_STALLED" // the clock did not reach the millisecond the generator needs in time
  | "TIMESTAMP_OUT_OF_RANGE" // the clock is before the layout's epoch or past its end
  | "TRANSPORT" // no replica answered (refused, reset, timed out)
  | "MALFORMED" // a 200 answer that does not follow the HTTP contract
  | "CONFIG"; // the options given to the Session are wrong

/** Base class of every error of the client. */
export class IdKeeperError extends Error {
  /** A ClientCode, or for a ServerError the server's problem code. */
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/** Why a session stopped issuing for good, as the conformance protocol names it. */
export type LossReason = "expired" | "empty-renew" | "count-mismatch" | "lease-lost" | "expired-on-arrival";

/**
 * The lease ended after it was held: it expired on the monotonic clock, Renew
 * answered 200 with an empty list or other node IDs or fencing tokens, or a renewed
 * lease had already expired. Issuing is blocked from that moment on.
 */
export class LeaseLostError extends IdKeeperError {
  readonly reason: LossReason;
  constructor(reason: LossReason, message: string) {
    super("LEASE_LOST", `idkeeper client: lease lost: ${message}`);
    this.reason = reason;
  }
}

/** Why open() refused the server's grant. */
export type GrantFault = "layout" | "node-range" | "count" | "duplicate" | "expired-on-arrival";

/**
 * The Alloc answer failed validation (DESIGN §4: fail fast): a layout whose widths
 * are not all positive or do not add up to 63, a node ID outside 0..2^nodeBits−1, not
 * the number of node IDs asked for, or a lease already expired. open() released the
 * grant and does not retry.
 */
export class InvalidGrantError extends IdKeeperError {
  readonly reason: GrantFault;
  constructor(reason: GrantFault, message: string) {
    super("INVALID_GRANT", `idkeeper client: invalid grant: ${message}`);
    this.reason = reason;
  }
}

/** An HTTP answer of the registry other than 200, with the members of its problem+json body. */
export class ServerError extends IdKeeperError {
  /** "alloc", "renew" or "remove". */
  readonly op: string;
  /** The base URL of the replica that answered. */
  readonly server: string;
  readonly status: number;
  /** The problem's code; "" when the body was not problem+json. */
  readonly problemCode: string;
  /** The problem's detail, else its title. */
  readonly detail: string;
  /** The request member at fault, for INVALID_REQUEST. */
  readonly field: string;
  /** The problem's extension members, e.g. "remaining" of NODE_IDS_EXHAUSTED. */
  readonly details: Record<string, unknown>;
  /** The body as received, at most 4 KiB. */
  readonly body: string;

  constructor(a: {
    op: string;
    server: string;
    status: number;
    problemCode: string;
    detail: string;
    field: string;
    details: Record<string, unknown>;
    body: string;
  }) {
    const code = a.problemCode || `HTTP_${a.status}`;
    super(code, `idkeeper client: ${a.op}: server ${a.server} answered ${a.status}${a.problemCode ? " " + a.problemCode : ""}${a.detail ? ": " + a.detail : ""}`);
    this.op = a.op;
    this.server = a.server;
    this.status = a.status;
    this.problemCode = a.problemCode;
    this.detail = a.detail;
    this.field = a.field;
    this.details = a.details;
    this.body = a.body;
  }

  /**
   * Whether an Alloc failing with this answer is worth retrying: a server or store
   * failure (5xx, 408, 429), a clock the operator may still correct
   * (CLOCK_SKEW_TOO_LARGE), a pool or quota that may free up (NODE_IDS_EXHAUSTED,
   * API_KEY_QUOTA_EXCEEDED). Every other answer is a configuration or program error.
   */
  get transient(): boolean {
    if (this.status >= 500 || this.status === 429 || this.status === 408) return true;
    return ["CLOCK_SKEW_TOO_LARGE", "NODE_IDS_EXHAUSTED", "API_KEY_QUOTA_EXCEEDED"].includes(this.problemCode);
  }
}

/** Whether err is an IdKeeperError with this code. */
export function isCode(err: unknown, code: string): boolean {
  return err instanceof IdKeeperError && err.code === code;
}
