import type { Timer } from "./clock.js";
import { settings, type SessionEvent, type SessionOptions, type Settings } from "./config.js";
import { IdKeeperError, LeaseLostError, ServerError, type InvalidGrantError } from "./errors.js";
import { breakRule, type Break } from "./faults.js";
import { NodeGenerator } from "./generator.js";
import { checkGrant, checkRenewed, minExpiry } from "./grant.js";
import { formatTime, type Layout } from "./layout.js";
import { newInstance, processIdentity } from "./requester.js";
import { Api, type Grant, type Lease, type Requester } from "./wire.js";

/** The deadline while no lease is held: every monotonic reading is past it. */
const notHeld = -Infinity;

type State = "new" | "opening" | "open" | "ended";

/** What close() did. */
export interface CloseResult {
  /** Whether a Remove was sent (false when the lease was already invalid, or never held). */
  removeSent: boolean;
  /** How many leases the registry released; null when no Remove succeeded. */
  released: number | null;
  /** The failed Remove's error (logged, never fatal: the server reclaims after expiry + grace). */
  error: unknown;
}

/**
 * Holds the leases of `count` node IDs and mints IDs with them (DESIGN §4).
 *
 * Lifecycle: open() allocates (retrying with backoff), validates the grant, renews
 * at once, then renews at half the lease in the background. The lease is valid
 * until a deadline on the monotonic clock: the send time of the last successful
 * request plus the lease time the server granted (expiresAt − serverUtcNow).
 * Issuing checks that deadline on every call, so it stops the moment the lease ends
 * even when no timer got to run. A lost lease ends the session: issuing is blocked,
 * `done` resolves, and onFatal is called. A session never gets a lease again; a
 * program that wants to go on creates a new one. close() blocks issuing, then sends
 * Remove with mintedUpTo, unless the lease is already invalid.
 *
 * Issuing (nextId, nextIds) is synchronous: Node.js runs it on one thread, so no
 * call is ever in flight when close() runs, and the drain is immediate. A
 * millisecond's sequence used up makes the call wait for the next millisecond, at
 * most about 1 ms per 1,024 IDs per node ID.
 */
export class Session {
  private readonly cfg: Settings;
  private readonly api: Api;
  /** @internal the rule this session breaks (conformance negative controls only). */
  [breakRule]: Break = "";

  private state: State = "new";
  private opened = false;
  private closing = false;
  private deadline = notHeld; // mono ms; issuing allowed while mono() < deadline
  private halt: IdKeeperError | null = null; // why issuing is refused for good
  private gens: NodeGenerator[] = [];
  private rr = 0;
  private heldLeases: Lease[] = [];
  private prescribed: Layout | null = null;
  private who: Requester | null = null;
  private renewTimer: Timer | null = null;
  private expiryTimer: Timer | null = null;
  private renewing: Promise<void> | null = null;
  private opening: Promise<void> | null = null;
  private closed: Promise<CloseResult> | null = null;
  private expiryQueued = false;
  private everHeld = false;
  private renewCount = 0;
  private readonly abort = new AbortController();
  private readonly closedError = new IdKeeperError("CLOSED", "idkeeper client: session is closed");
  private endErr: IdKeeperError | null = null;
  private resolveDone!: (err: IdKeeperError) => void;
  /** Resolves when the session has ended (closed, lease lost, or open failed) with the reason. */
  readonly done: Promise<IdKeeperError> = new Promise((r) => (this.resolveDone = r));

  /** Checks the options; does no I/O. Throws a CONFIG IdKeeperError. */
  constructor(options: SessionOptions) {
    this.cfg = settings(options);
    const log = this.cfg.log;
    this.api = new Api(this.cfg.urls, this.cfg.apiKey, this.cfg.fetch, this.cfg.requestTimeoutMs, (op, from, to, err) =>
      log.warn("idkeeper client: registry replica failed; trying the next one", { op, server: from, next: to, err: String(err) }),
    );
  }

  /** new Session(options) followed by open(). */
  static async start(options: SessionOptions): Promise<Session> {
    const s = new Session(options);
    await s.open();
    return s;
  }

  /**
   * Obtains the leases and starts renewing them. Retries Alloc with backoff on
   * transport errors, timeouts, malformed answers, 5xx, 408, 429 and the 409s
   * CLOCK_SKEW_TOO_LARGE, NODE_IDS_EXHAUSTED and API_KEY_QUOTA_EXCEEDED, logging the
   * server's answer each time; then renews once at once. Rejects with: CLOSED when
   * close() was called meanwhile; a ServerError for an answer retrying cannot fix;
   * an InvalidGrantError; a LeaseLostError when the first Renew proves the lease
   * gone. onFatal is not called for these. A session whose open failed has ended.
   */
  open(): Promise<void> {
    if (this.closing || this.state === "ended") return Promise.reject(this.closedError);
    if (this.state !== "new") return Promise.reject(new IdKeeperError("CONFIG", "idkeeper client: open called twice"));
    this.state = "opening";
    this.opening = this.doOpen().catch((err: unknown) => {
      const e = err instanceof IdKeeperError ? err : new IdKeeperError("CONFIG", `idkeeper client: open: ${String(err)}`, { cause: err });
      if (!this.closing) {
        this.state = "ended";
        this.end(e);
      }
      throw e;
    });
    return this.opening;
  }

  private async doOpen(): Promise<void> {
    const id = this.cfg.requester ?? processIdentity();
    // The session's own instance, kept across its Alloc retries and never reused:
    // no other session can be answered this session's lease, nor remove it.
    const instance = this[breakRule] === "reuse-instance" ? "conformance-reused-instance" : newInstance();
    this.who = { machineId: id.machineId, pid: id.pid, startedAtMs: id.startedAtMs, instance };
    const { grant, sent } = await this.allocate();
    if (this[breakRule] === "accept-bad-layout" && grant.layout) Object.assign(grant.layout, { timestampBits: 41, nodeBits: 12, sequenceBits: 10 });
    const received = this.cfg.clock.mono();
    const base = this[breakRule] === "deadline-from-receive" ? received : sent;
    let gens: NodeGenerator[];
    try {
      gens = this.validateGrant(grant, base);
    } catch (err) {
      const e = err as InvalidGrantError;
      this.cfg.log.error("idkeeper client: the server's grant is unusable; releasing it", { err: e.message });
      this.emit({ type: "invalid", reason: e.reason === "layout" || e.reason === "node-range" ? "layout" : e.reason === "expired-on-arrival" ? "expired-on-arrival" : "count-mismatch", error: e });
      await this.release();
      throw e;
    }
    if (this.closing) {
      await this.release();
      throw this.closedError;
    }
    this.prescribed = grant.layout;
    this.heldLeases = grant.leases;
    this.gens = gens;
    this.state = "open";
    this.everHeld = true;
    this.setDeadline(base, grant);

    // The first Renew at once proves the renew path before the program relies on it.
    const fatal = await this.renewGuarded();
    if (fatal) throw fatal;
    if (this.halt) throw this.halt;
    this.opened = true;
    const l = grant.layout!;
    this.cfg.log.info("idkeeper client: lease held", {
      nodes: this.nodeIds,
      expiresAt: formatTime(minExpiry(this.heldLeases)),
      layout: `${l.timestampBits}/${l.nodeBits}/${l.sequenceBits}`,
    });
  }

  /** Sends Alloc until it succeeds, the session is closed, or the answer is one retrying cannot fix. */
  private async allocate(): Promise<{ grant: Grant; sent: number }> {
    const c = this.cfg;
    for (let attempt = 0; ; attempt++) {
      if (this.closing) throw this.closedError;
      const sent = c.clock.mono();
      try {
        const grant = await this.api.alloc(this.who!, c.count, c.clock.now(), c.client, this.abort.signal);
        return { grant, sent };
      } catch (err) {
        if (this.closing) throw this.closedError;
        if (err instanceof ServerError && !err.transient) {
          c.log.error("idkeeper client: alloc refused", { err: err.message, status: err.status, code: err.problemCode });
          throw err;
        }
        const d = this[breakRule] === "no-backoff" ? 0 : this.backoff(attempt);
        c.log.warn("idkeeper client: alloc failed; retrying", { attempt: attempt + 1, retryInMs: Math.round(d), err: String((err as Error).message ?? err) });
        this.emit({ type: "retry", op: "alloc", delayMs: d, error: err });
        await this.sleep(d);
      }
    }
  }

  /**
   * The wait before Alloc retry attempt+1: min(max, min(max, initial ×
   * multiplier^attempt) × (1 ± jitter)). Capping the base first keeps the jitter at
   * the cap, so clients that failed together do not retry together; capping after
   * the jitter keeps every wait within max.
   * @internal exported for the unit tests through the class
   */
  backoff(attempt: number): number {
    const c = this.cfg;
    const base = Math.min(c.backoffInitialMs * c.backoffMultiplier ** attempt, c.backoffMaxMs);
    return Math.min(base * (1 + c.backoffJitter * (2 * c.random() - 1)), c.backoffMaxMs);
  }

  /** Waits ms on the session's clock, or until close() is called. */
  private sleep(ms: number): Promise<void> {
    const signal = this.abort.signal;
    if (signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const onAbort = () => {
        t.cancel();
        resolve();
      };
      const t = this.cfg.clock.setTimer(
        ms,
        () => {
          signal.removeEventListener("abort", onAbort);
          resolve();
        },
        true,
      );
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** Checks an Alloc answer (DESIGN §4: fail fast; see checkGrant) and builds one generator per lease, in node ID order. */
  private validateGrant(g: Grant, base: number): NodeGenerator[] {
    checkGrant(g, this.cfg.count, this.cfg.clock.now(), this.cfg.clock.mono(), base, this[breakRule] === "ignore-expiry");
    const layout = g.layout!;
    const ignoreExpiry = this[breakRule] === "ignore-expiry";
    return g.leases.map((l) => {
      const gen = new NodeGenerator(layout, l.nodeId, this.cfg.clock, {
        maxBackwardStepMs: this.cfg.maxBackwardStepMs,
        onClockStep: (s) =>
          this.cfg.log.warn(
            s.caughtUp
              ? `idkeeper client: node ID ${s.nodeId}: the wall clock caught up`
              : `idkeeper client: node ID ${s.nodeId}: the wall clock stepped back by ${s.widthMs} ms; ${s.widthMs > s.maxBackwardStepMs ? "issuing fails with CLOCK_BACKWARDS until it is back within" : "minting at the last timestamp (logical time) within"} ${s.maxBackwardStepMs} ms; check NTP`,
          ),
      });
      gen.setWindow(l.notBeforeMs, ignoreExpiry ? NaN : l.expiresAtMs);
      return gen;
    });
  }

  /** Sends a best-effort Remove without mintedUpTo for a grant this session will not use. */
  private async release(): Promise<void> {
    try {
      await this.api.remove(this.who!, NaN, new AbortController().signal);
    } catch (err) {
      this.cfg.log.error("idkeeper client: remove failed; the server reclaims the node IDs after expiry + grace", { err: String(err) });
    }
  }

  /**
   * Sets the lease deadline from an answer to a request sent at monotonic time base:
   * the server's lease time (expiresAt − serverUtcNow) counts from the send time,
   * never from the arrival, so a slow answer shortens the lease and never lengthens it.
   */
  private setDeadline(base: number, g: Grant): void {
    this.deadline = base + minExpiry(g.leases) - g.serverNowMs;
    this.armExpiry();
  }

  private armExpiry(): void {
    this.expiryTimer?.cancel();
    this.expiryTimer = null;
    if (this[breakRule] === "ignore-expiry") return;
    this.expiryTimer = this.cfg.clock.setTimer(this.deadline - this.cfg.clock.mono(), () => this.onExpiry(), false);
  }

  /** Runs at the deadline (or when issuing found it passed). Issuing has stopped by itself; this reports it. */
  private onExpiry(): void {
    this.expiryQueued = false;
    if (this.state === "open" && !this.closing && this.valid()) {
      this.armExpiry(); // renewed meanwhile, or a timer that fired a hair early
      return;
    }
    const cause = new LeaseLostError("expired", "the lease expired on the local monotonic clock");
    if (this.fail(cause)) this.cfg.onFatal(cause);
  }

  /** Whether the lease deadline is still ahead on the monotonic clock. */
  private valid(): boolean {
    if (this.deadline === notHeld) return false;
    return this[breakRule] === "ignore-expiry" || this.cfg.clock.mono() < this.deadline;
  }

  /** Runs renewOnce unless one is running, and hands a fatal answer to onFatal. */
  private renewTick(): void {
    if (this.renewing) return;
    void this.renewGuarded()
      .then((fatal) => {
        if (fatal) this.cfg.onFatal(fatal);
      })
      .catch((err: unknown) => this.cfg.log.error("idkeeper client: renew or onFatal threw", { err: String(err) }));
  }

  private async renewGuarded(): Promise<LeaseLostError | null> {
    let fatal: LeaseLostError | null = null;
    const p = this.renewOnce().then((f) => {
      fatal = f;
    });
    this.renewing = p;
    try {
      await p;
    } finally {
      this.renewing = null;
    }
    return fatal;
  }

  /**
   * Sends one Renew, classifies the answer and schedules the next one. Returns the
   * error to report as fatal, if any; the session has then ended.
   *
   * A transport error, a timeout, any status other than 200 and a malformed 200
   * prove nothing about the lease: retry, at min(renewLoopMs, time left / 4), at
   * least minRetryMs; the deadline stops issuing in time if no good answer comes. A
   * well-formed 200 that shows the lease gone (an empty list, fewer or other node
   * IDs, other fencing tokens) or already expired is fatal.
   */
  private async renewOnce(): Promise<LeaseLostError | null> {
    if (this.state !== "open" || this.closing) return null;
    const held = this.heldLeases.slice();
    if (!this.valid()) return this.lost(new LeaseLostError("expired", "the lease expired on the local monotonic clock"));
    const c = this.cfg;
    const sent = c.clock.mono();
    let g: Grant;
    try {
      g = await this.api.renew(this.who!, c.clock.now(), held.map((l) => l.fencingToken), this[breakRule] === "no-receipts" ? [] : held.map((l) => l.receipt).filter((r) => r !== ""), this.abort.signal);
    } catch (err) {
      if (this.abort.signal.aborted || this.state !== "open") return null;
      const d = this.retryInterval();
      this.schedule(d);
      const se = err instanceof ServerError ? err : null;
      const fields = { err: String((err as Error).message ?? err), retryInMs: Math.round(d), timeLeftMs: Math.round(this.timeLeftMs) };
      if (se && se.status < 500) c.log.error("idkeeper client: renew refused; retrying until the lease ends", fields);
      else c.log.warn("idkeeper client: renew failed; retrying", fields);
      this.emit({ type: "retry", op: "renew", delayMs: d, error: err });
      return null;
    }
    if (!this.valid()) return this.lost(new LeaseLostError("expired", "the lease expired on the local monotonic clock"));
    const base = this[breakRule] === "deadline-from-receive" ? c.clock.mono() : sent;
    const fault = checkRenewed(held, g, c.clock.now(), c.clock.mono(), base, this[breakRule] === "ignore-expiry");
    if (fault) {
      const brk = this[breakRule];
      if ((brk === "ignore-empty-renew" && fault.reason === "empty-renew") || (brk === "ignore-count-mismatch" && fault.reason === "count-mismatch")) {
        this.schedule(this.retryInterval());
        return null;
      }
      return this.lost(fault);
    }
    if (this.state !== "open" || this.closing || this.halt) return null;
    g.leases.forEach((l, i) => {
      // Renew never moves the window's start back; a later one from the server (a
      // lease restored after a store reset) is the safer one to keep.
      if (held[i]!.notBeforeMs > l.notBeforeMs) l.notBeforeMs = held[i]!.notBeforeMs;
      if (l.receipt === "") l.receipt = held[i]!.receipt;
      this.gens[i]!.setWindow(l.notBeforeMs, this[breakRule] === "ignore-expiry" ? NaN : l.expiresAtMs);
    });
    this.heldLeases = g.leases;
    this.setDeadline(base, g);
    this.renewCount++;
    const lease = minExpiry(g.leases) - g.serverNowMs;
    this.schedule(Math.max(base + lease / 2 - c.clock.mono(), 0));
    this.emit({ type: "renewed", nodeIds: this.nodeIds, expiresAtMs: minExpiry(g.leases) });
    c.log.debug?.("idkeeper client: renewed", { expiresAt: formatTime(minExpiry(g.leases)) });
    return null;
  }

  /** The wait before the next Renew after a failed one: min(renewLoopMs, time left / 4), at least minRetryMs. */
  private retryInterval(): number {
    const left = this.deadline - this.cfg.clock.mono();
    return Math.max(Math.min(this.cfg.renewLoopMs, left / 4), this.cfg.minRetryMs);
  }

  private schedule(ms: number): void {
    if (this.state !== "open" || this.closing) return;
    this.renewTimer?.cancel();
    this.renewTimer = this.cfg.clock.setTimer(this[breakRule] === "renew-late" ? ms * 1.5 : ms, () => this.renewTick(), false);
  }

  /** Fails the session with cause and returns cause when onFatal must get it. */
  private lost(cause: LeaseLostError): LeaseLostError | null {
    return this.fail(cause) ? cause : null;
  }

  /**
   * Blocks issuing at once and ends the session because the lease is lost. Reports
   * whether the caller must call onFatal: false when the session had ended, is being
   * closed, or is still in open() (which rejects with the loss itself).
   */
  private fail(cause: LeaseLostError): boolean {
    if (this.state !== "open") return false;
    this.halt = cause;
    this.deadline = notHeld;
    this.stopTimers();
    const closing = this.closing;
    if (!closing) this.state = "ended";
    this.abort.abort(cause);
    this.emit({ type: "invalid", reason: cause.reason, error: cause });
    if (closing) {
      this.cfg.log.warn("idkeeper client: lease lost while closing", { err: cause.message });
      return false;
    }
    this.cfg.log.error("idkeeper client: lease lost; issuing is blocked", { err: cause.message });
    this.end(cause);
    return this.opened;
  }

  /**
   * Ends the session: blocks new issuing (CLOSED), stops renewing, waits for an
   * open() or a Renew in flight to return, and then, if the lease is still valid,
   * sends Remove carrying mintedUpTo, the highest timestamp minted (left out when
   * nothing was minted), so the registry can hand the node IDs out again at once.
   * When the lease is already invalid it sends nothing. A failed Remove is logged
   * and reported, never fatal. Idempotent: a second call gets the first's result.
   */
  close(): Promise<CloseResult> {
    this.closed ??= this.doClose();
    return this.closed;
  }

  private async doClose(): Promise<CloseResult> {
    this.closing = true;
    this.halt ??= this.closedError;
    this.stopTimers();
    this.abort.abort(this.closedError);
    await this.opening?.catch(() => {});
    await this.renewing?.catch(() => {});
    const stillValid = this.state === "open" && this.halt === this.closedError && this.cfg.clock.mono() < this.deadline;
    const send = this[breakRule] === "remove-when-invalid" ? this.everHeld : stillValid;
    const wasOpen = this.state === "open";
    this.state = "ended";
    this.deadline = notHeld;
    const res: CloseResult = { removeSent: false, released: null, error: null };
    if (send) {
      const upTo = this[breakRule] === "remove-without-minted" ? NaN : this.mintedUpTo();
      res.removeSent = true;
      try {
        res.released = await this.api.remove(this.who!, upTo, new AbortController().signal);
        this.cfg.log.info("idkeeper client: leases released", { released: res.released, mintedUpTo: Number.isNaN(upTo) ? "" : formatTime(upTo) });
      } catch (err) {
        res.error = err;
        this.cfg.log.error("idkeeper client: remove failed; the server reclaims the node IDs after expiry + grace", { err: String(err) });
      }
    } else if (wasOpen) {
      this.cfg.log.warn("idkeeper client: closed without Remove: the lease was no longer valid");
    }
    this.end(this.closedError);
    return res;
  }

  /** The latest mintedUpTo of the generators in Unix ms; NaN when none minted. */
  private mintedUpTo(): number {
    let t = NaN;
    for (const g of this.gens) {
      const u = g.mintedUpTo();
      if (!Number.isNaN(u) && !(u <= t)) t = u;
    }
    return t;
  }

  private stopTimers(): void {
    this.renewTimer?.cancel();
    this.expiryTimer?.cancel();
    this.renewTimer = this.expiryTimer = null;
  }

  private end(err: IdKeeperError): void {
    if (this.endErr) return;
    this.endErr = err;
    this.resolveDone(err);
  }

  private emit(e: SessionEvent): void {
    try {
      this.cfg.onEvent(e);
    } catch (err) {
      this.cfg.log.error("idkeeper client: onEvent threw", { err: String(err) });
    }
  }

  // ---- issuing ----

  /** The error a refused issuing call throws. */
  private refusal(): IdKeeperError {
    if (this.halt) return this.halt;
    if (this.deadline === notHeld) return new IdKeeperError("NOT_OPEN", "idkeeper client: session is not open: no lease is held yet");
    if (!this.expiryQueued) {
      // Report the expiry now rather than when the timer gets its turn.
      this.expiryQueued = true;
      queueMicrotask(() => this.onExpiry());
    }
    return new LeaseLostError("expired", "the lease expired on the local monotonic clock");
  }

  /**
   * Mints one ID, using the node IDs in turn. Throws NOT_OPEN, CLOSED, a
   * LeaseLostError (the lease is over), or a generator error (BEFORE_WINDOW,
   * WINDOW_ENDED, CLOCK_BACKWARDS, CLOCK_STALLED, TIMESTAMP_OUT_OF_RANGE); never
   * returns a duplicate. An ID is returned only if the lease was valid after it
   * was minted.
   */
  nextId(): bigint {
    if (this.halt || this.deadline === notHeld) throw this.refusal();
    const gens = this.gens;
    let g = gens[0]!;
    if (gens.length > 1) {
      g = gens[this.rr]!;
      this.rr = (this.rr + 1) % gens.length;
    }
    const id = g.next();
    if (!this.valid()) throw this.refusal();
    return id;
  }

  /** nextId() in its JS-safe form: the decimal string. */
  nextIdString(): string {
    return this.nextId().toString();
  }

  /**
   * Mints n unique IDs in ascending order, all or nothing (after an error the IDs
   * minted are dropped, never handed out: a gap). A batch of up to one
   * millisecond's sequence goes to one node ID, the next node ID in turn; a larger
   * one is split into one contiguous chunk per node ID.
   */
  nextIds(n: number): bigint[] {
    if (!Number.isInteger(n) || n < 0) throw new RangeError(`n ${n} is not a count`);
    if (this.halt || this.deadline === notHeld) throw this.refusal();
    if (!this.valid()) throw this.refusal();
    const gens = this.gens;
    const seqCount = 2 ** this.prescribed!.sequenceBits;
    const parts = gens.length > 1 ? Math.min(gens.length, Math.ceil(n / seqCount)) : 1;
    const size = Math.ceil(n / Math.max(parts, 1));
    const out = new Array<bigint>(n);
    for (let filled = 0; filled < n; ) {
      const g = gens[this.rr]!;
      this.rr = (this.rr + 1) % gens.length;
      const k = Math.min(n - filled, size);
      g.fill(out, filled, k);
      filled += k;
      if (!this.valid()) throw this.refusal();
    }
    if (parts > 1) out.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    return out;
  }

  /** Mints one ID with the i-th node ID (0 ≤ i < count) only: IDs of one node ID are strictly increasing. */
  nextIdOn(i: number): bigint {
    const g = this.gens[i];
    if (this.halt || this.deadline === notHeld) throw this.refusal();
    if (!g) throw new RangeError(`generator ${i} is outside 0..${this.gens.length - 1}`);
    const id = g.next();
    if (!this.valid()) throw this.refusal();
    return id;
  }

  /**
   * null when issuing can succeed now, else the reason: the issuing path's own
   * refusal, BEFORE_WINDOW while a node ID is cooling (its window opens later),
   * WINDOW_ENDED, or CLOCK_BACKWARDS. Serve it as the health check: it is never
   * green while issuing fails for lack of a lease.
   */
  check(): IdKeeperError | null {
    if (this.halt || this.deadline === notHeld || !this.valid()) return this.refusal();
    const now = Math.floor(this.cfg.clock.now());
    for (const g of this.gens) {
      const w = g.window();
      if (!Number.isNaN(w.notBeforeMs) && now < Math.ceil(w.notBeforeMs)) {
        return new IdKeeperError("BEFORE_WINDOW", `idkeeper client: node ID ${g.nodeId} is cooling: the generator waits until ${formatTime(Math.ceil(w.notBeforeMs))} to mint`);
      }
      if (!Number.isNaN(w.expiresAtMs) && now > Math.floor(w.expiresAtMs)) {
        return new IdKeeperError("WINDOW_ENDED", `idkeeper client: node ID ${g.nodeId}: the lease window ended at ${formatTime(w.expiresAtMs)}`);
      }
      const ce = g.clockError();
      if (ce) return ce;
    }
    return null;
  }

  /** Whether check() returns null. */
  get healthy(): boolean {
    return this.check() === null;
  }

  // ---- what the session holds ----

  /** The leases held, sorted by node ID, as of the last Alloc or Renew (copies). */
  get leases(): Lease[] {
    return this.heldLeases.map((l) => ({ ...l }));
  }

  /** The node IDs held, ascending; empty before open succeeded. */
  get nodeIds(): number[] {
    return this.heldLeases.map((l) => l.nodeId);
  }

  /** The layout the server prescribed; null before open succeeded. */
  get layout(): Layout | null {
    return this.prescribed;
  }

  /** The requester the session uses, its own instance included; null before open. */
  get requester(): Requester | null {
    return this.who ? { ...this.who } : null;
  }

  /** How long the lease stays valid on the monotonic clock, in ms; 0 when no valid lease is held. */
  get timeLeftMs(): number {
    if (this.deadline === notHeld) return 0;
    return Math.max(this.deadline - this.cfg.clock.mono(), 0);
  }

  /** Successful Renews so far (the one open() sends included). */
  get renewals(): number {
    return this.renewCount;
  }

  /** null while the session has not ended; then why: CLOSED, the LeaseLostError, or open's error. */
  get err(): IdKeeperError | null {
    return this.endErr;
  }
}
