/**
 * The time source of a Session. It has two faces, and the Session never mixes them:
 * `now` is the wall clock (sent as clientUtcNow; the generators mint their
 * timestamps from it; NTP may step it), `mono` is monotonic (lease deadlines, the
 * renew and retry schedules). Tests inject a fake whose time moves only when the
 * test says so.
 */
export interface Clock {
  /** The wall clock in Unix milliseconds (a fraction is allowed, and rounded down). */
  now(): number;
  /** A monotonic reading in milliseconds: never goes back, not moved by clock steps. */
  mono(): number;
  /**
   * Runs fn once, after ms have elapsed on the monotonic clock. keepAlive says
   * whether the pending timer keeps the Node.js process alive.
   */
  setTimer(ms: number, fn: () => void, keepAlive: boolean): Timer;
  /**
   * Blocks the caller for about ms (at most), synchronously: the generator's wait
   * for the next millisecond. Returning early is harmless (the caller reads the
   * clock again); ms ≤ 0 may return at once.
   */
  pause(ms: number): void;
}

/** A pending setTimer call. */
export interface Timer {
  cancel(): void;
}

/**
 * Below this much, the system clock's pause returns at once and the generator
 * reads the clock again: a sleep of the thread overshoots by 0.1 ms and more on a
 * busy machine, which would cost that share of a millisecond's IDs at every
 * millisecond boundary (measured: 93 % of the ceiling with 0.25 ms, 95–99 % with
 * 0.4 ms, docs/benchmarks.md).
 */
const spinBelowMs = 0.4;

const napCell = new Int32Array(new SharedArrayBuffer(4));

/**
 * The process's clock: Date.now() for the wall clock, performance.now() (monotonic)
 * for mono, setTimeout for timers, and Atomics.wait for the generator's short
 * synchronous pauses (the thread sleeps, it does not spin, except for the last
 * 0.4 ms before the boundary it waits for).
 */
export const systemClock: Clock = Object.freeze({
  now: () => Date.now(),
  mono: () => performance.now(),
  setTimer(ms: number, fn: () => void, keepAlive: boolean): Timer {
    const t = setTimeout(fn, Math.max(0, ms));
    if (!keepAlive) t.unref();
    return { cancel: () => clearTimeout(t) };
  },
  pause(ms: number): void {
    if (ms > spinBelowMs) Atomics.wait(napCell, 0, 0, ms - spinBelowMs + 0.05);
  },
});
