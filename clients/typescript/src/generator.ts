import type { Clock } from "./clock.js";
import { IdKeeperError } from "./errors.js";
import { formatTime, type Layout } from "./layout.js";

/** The backward clock step a generator tolerates by default: 5 s (the Go client's). */
export const defaultMaxBackwardStepMs = 5000;

/**
 * The longest a generator blocks the thread to wait for the wall clock, on top of
 * the milliseconds it waits for: the Go client's ClockStallSlack. A Node.js program
 * has one thread, so a wait for a clock that stepped back is not waited out: past
 * this bound the call fails with CLOCK_STALLED and the program tries again later.
 */
export const clockStallSlackMs = 50;

/** A clock step back, reported twice per episode (when it starts and when the clock caught up). */
export interface ClockStep {
  nodeId: number;
  /** How far the wall clock was behind the highest reading seen, in ms. */
  widthMs: number;
  maxBackwardStepMs: number;
  caughtUp: boolean;
}

/**
 * Mints IDs for one node ID, only with timestamps inside its lease window
 * [notBefore, expiresAt] (both inclusive at millisecond resolution), and never a
 * duplicate: IDs are strictly increasing. Synchronous: when a millisecond's
 * sequence is used up it waits for the next millisecond, sleeping (Atomics.wait)
 * rather than spinning but for the last 0.4 ms. While the wall clock
 * is behind the highest reading seen by at most maxBackwardStepMs it keeps minting
 * at that reading (logical time); further behind it fails with CLOCK_BACKWARDS.
 *
 * It knows nothing of leases: the Session checks the lease deadline around it.
 */
export class NodeGenerator {
  readonly nodeId: number;
  private readonly clock: Clock;
  private readonly epochMs: number;
  private readonly maxTs: number;
  private readonly seqMask: number;
  private readonly shift: bigint;
  private readonly nodeField: bigint;
  private readonly maxBackMs: number;
  private readonly onStep: ((s: ClockStep) => void) | undefined;

  private nb = -Infinity; // window start, timestamp field
  private ex = Infinity; // window end, timestamp field
  private nbMs = NaN;
  private exMs = NaN;

  private lastTs = -1; // timestamp of the last ID, -1 before the first
  private seq = 0; // its sequence
  private base = 0n; // lastTs << shift | nodeField
  private high = -Infinity; // highest wall-clock reading seen (timestamp field)
  private highMono = 0; // mono() when high was first seen: the estimate of that millisecond's start
  private rolling = false; // a backward step is open

  constructor(layout: Layout, nodeId: number, clock: Clock, opts: { maxBackwardStepMs?: number; onClockStep?: (s: ClockStep) => void } = {}) {
    this.nodeId = nodeId;
    this.clock = clock;
    this.epochMs = layout.epochMs;
    this.maxTs = 2 ** layout.timestampBits - 1;
    this.seqMask = 2 ** layout.sequenceBits - 1;
    this.shift = BigInt(layout.nodeBits + layout.sequenceBits);
    this.nodeField = BigInt(nodeId) << BigInt(layout.sequenceBits);
    const back = opts.maxBackwardStepMs ?? defaultMaxBackwardStepMs;
    this.maxBackMs = back < 0 ? 0 : Math.floor(back);
    this.onStep = opts.onClockStep;
  }

  /**
   * Sets the window the generator mints in, in Unix milliseconds: from notBefore
   * (rounded up) to expiresAt (rounded down), both inclusive. NaN leaves a side
   * unbounded. A renewal moves expiresAt.
   */
  setWindow(notBeforeMs: number, expiresAtMs: number): void {
    this.nbMs = notBeforeMs;
    this.exMs = expiresAtMs;
    this.nb = Number.isNaN(notBeforeMs) ? -Infinity : Math.ceil(notBeforeMs) - this.epochMs;
    this.ex = Number.isNaN(expiresAtMs) ? Infinity : Math.floor(expiresAtMs) - this.epochMs;
  }

  /** The window as last set, in Unix milliseconds (NaN: unbounded). */
  window(): { notBeforeMs: number; expiresAtMs: number } {
    return { notBeforeMs: this.nbMs, expiresAtMs: this.exMs };
  }

  /**
   * The start of the millisecond of the highest timestamp minted, in Unix ms, or
   * NaN when none was: the mintedUpTo of a graceful Remove.
   */
  mintedUpTo(): number {
    return this.lastTs < 0 ? NaN : this.epochMs + this.lastTs;
  }

  /** Mints one ID. Throws an IdKeeperError (BEFORE_WINDOW, WINDOW_ENDED, CLOCK_BACKWARDS, CLOCK_STALLED, TIMESTAMP_OUT_OF_RANGE) and then mints nothing. */
  next(): bigint {
    const ts = this.read();
    let t = this.lastTs;
    let s: number;
    if (ts > t) {
      t = ts;
      s = 0;
    } else if (this.seq < this.seqMask) {
      s = this.seq + 1;
    } else {
      t++;
      s = 0;
    }
    this.admit(t);
    if (t > this.high) this.waitFor(t, ts);
    if (t !== this.lastTs) {
      this.lastTs = t;
      this.base = (BigInt(t) << this.shift) | this.nodeField;
    }
    this.seq = s;
    return this.base | BigInt(s);
  }

  /**
   * Fills out[at..at+n) with n ascending IDs: one clock read per millisecond
   * instead of per ID. All or nothing is the caller's business: on an error the
   * IDs already written stay valid and unique (they are a gap if dropped).
   */
  fill(out: bigint[], at: number, n: number): void {
    let left = n;
    while (left > 0) {
      const first = this.next();
      out[at++] = first;
      left--;
      const k = Math.min(left, this.seqMask - this.seq);
      for (let i = 1; i <= k; i++) out[at++] = first + BigInt(i);
      this.seq += k;
      left -= k;
    }
  }

  /** The clock error a call would fail with now (CLOCK_BACKWARDS), or null: for health checks. */
  clockError(): IdKeeperError | null {
    if (this.lastTs < 0) return null;
    const behind = this.high - (Math.floor(this.clock.now()) - this.epochMs);
    return behind > this.maxBackMs ? this.backwards(behind) : null;
  }

  /** Reads the wall clock as a timestamp field, keeping the highest reading and judging steps back. */
  private read(): number {
    const ts = Math.floor(this.clock.now()) - this.epochMs;
    if (ts > this.high) {
      this.high = ts;
      this.highMono = this.clock.mono();
      if (this.rolling) {
        this.rolling = false;
        this.onStep?.({ nodeId: this.nodeId, widthMs: 0, maxBackwardStepMs: this.maxBackMs, caughtUp: true });
      }
    } else if (ts < this.high) {
      const behind = this.high - ts;
      if (!this.rolling) {
        this.rolling = true;
        this.onStep?.({ nodeId: this.nodeId, widthMs: behind, maxBackwardStepMs: this.maxBackMs, caughtUp: false });
      }
      if (behind > this.maxBackMs) throw this.backwards(behind);
    }
    return ts;
  }

  /** Throws when timestamp t lies outside the window or the layout's range. */
  private admit(t: number): void {
    if (t < this.nb) {
      throw new IdKeeperError("BEFORE_WINDOW", `idkeeper client: node ID ${this.nodeId}: before the lease window: cannot mint before ${formatTime(Math.ceil(this.nbMs))}`);
    }
    if (t > this.ex) {
      throw new IdKeeperError("WINDOW_ENDED", `idkeeper client: node ID ${this.nodeId}: the lease window has ended: cannot mint after ${formatTime(this.exMs)}`);
    }
    if (t < 0 || t > this.maxTs) {
      throw new IdKeeperError("TIMESTAMP_OUT_OF_RANGE", `idkeeper client: the clock is outside the layout's range`);
    }
  }

  /** Waits until the wall clock reaches timestamp t (the clock read ts), or throws CLOCK_STALLED. */
  private waitFor(t: number, ts: number): void {
    if (t - ts > clockStallSlackMs) {
      throw new IdKeeperError("CLOCK_STALLED", `idkeeper client: node ID ${this.nodeId}: the sequence of the last millisecond minted is used up and the wall clock is ${t - ts - 1} ms behind it (stepped back): try again later`);
    }
    const start = this.clock.mono();
    const limit = t - ts + clockStallSlackMs;
    for (;;) {
      const now = this.read();
      if (now >= t) return;
      const m = this.clock.mono();
      if (m - start > limit) {
        throw new IdKeeperError("CLOCK_STALLED", `idkeeper client: node ID ${this.nodeId}: waited ${(m - start).toFixed(1)} ms for millisecond ${t}, the clock is still at ${now}`);
      }
      this.clock.pause(this.highMono + (t - this.high) - m);
    }
  }

  private backwards(behind: number): IdKeeperError {
    return new IdKeeperError("CLOCK_BACKWARDS", `idkeeper client: node ID ${this.nodeId}: the wall clock moved backwards by ${behind} ms (tolerated: ${this.maxBackMs} ms)`);
  }
}
