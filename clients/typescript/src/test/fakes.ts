/**
 * Test doubles: a clock whose time moves only when the test says so, and an
 * in-memory registry answering the client's fetch by the HTTP contract, with
 * hooks to answer otherwise.
 */
import type { Clock, Timer } from "../clock.js";
import type { Fetch } from "../wire.js";

interface Pending {
  due: number;
  seq: number;
  fn: () => void;
}

/** Lets the promise chains started by a timer or a fake answer run to their end. */
export async function settle(rounds = 20): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise((r) => setImmediate(r));
}

export class FakeClock implements Clock {
  wall: number;
  monoMs = 1_000;
  private timers: Pending[] = [];
  private seq = 0;

  constructor(wall = Date.UTC(2026, 5, 1, 12, 0, 0)) {
    this.wall = wall;
  }

  now(): number {
    return this.wall;
  }
  mono(): number {
    return this.monoMs;
  }
  setTimer(ms: number, fn: () => void): Timer {
    const p: Pending = { due: this.monoMs + Math.max(ms, 0), seq: this.seq++, fn };
    this.timers.push(p);
    return { cancel: () => (this.timers = this.timers.filter((t) => t !== p)) };
  }
  /** The generator's wait: time moves on (without firing timers: the generator's thread is busy). */
  pause(ms: number): void {
    this.move(Math.max(ms, 0.05));
  }
  /** Moves both clocks by ms without running timers. */
  move(ms: number): void {
    this.wall += ms;
    this.monoMs += ms;
  }
  /** Steps the wall clock only (NTP). */
  stepWall(ms: number): void {
    this.wall += ms;
  }
  /** The pending timers' delays from now, soonest first. */
  pendingDelays(): number[] {
    return this.timers.map((t) => t.due - this.monoMs).sort((a, b) => a - b);
  }
  /** Moves time on by ms, running every timer that falls due on the way, letting its async work settle in between. */
  async advance(ms: number): Promise<void> {
    const target = this.monoMs + ms;
    await settle();
    for (;;) {
      const next = this.timers.filter((t) => t.due <= target).sort((a, b) => a.due - b.due || a.seq - b.seq)[0];
      if (!next) break;
      this.timers = this.timers.filter((t) => t !== next);
      this.move(next.due - this.monoMs);
      next.fn();
      await settle();
    }
    this.move(target - this.monoMs);
    await settle();
  }
}

/** A request the fake registry received. */
export interface Call {
  path: string;
  body: Record<string, any>;
  mono: number;
  url: string;
}

/** What a hook answers instead of the registry: a status and body, "refuse" (a transport error), or undefined (the registry answers). */
export type Answer = { status: number; body: unknown; contentType?: string } | "refuse" | undefined;

export const layoutJSON = { epoch: "2026-01-01T00:00:00.000Z", timestampBits: 41, nodeBits: 12, sequenceBits: 10 };

/**
 * An in-memory registry: Alloc grants count node IDs from firstNode on with a first
 * lease of firstLeaseMs, Renew extends to leaseMs, Remove releases. Times come from
 * the clock's wall time. delayMs moves the clock on between the server's answer and
 * its arrival (a slow network).
 */
export class FakeRegistry {
  calls: Call[] = [];
  firstLeaseMs = 600_000;
  leaseMs = 48 * 3_600_000;
  firstNode = 0;
  token = 9;
  delayMs = 0;
  layout: Record<string, unknown> = { ...layoutJSON };
  receipt = "rcpt";
  /** Answers before the registry does; shift() per call when an array. */
  hook: ((c: Call) => Answer) | null = null;
  private held = new Map<string, number[]>();

  constructor(private readonly clock: FakeClock) {}

  calledPaths(): string[] {
    return this.calls.map((c) => c.path);
  }

  /** The fetch to give the Session. */
  readonly fetch: Fetch = async (url, init) => {
    const path = new URL(url).pathname;
    const body = JSON.parse(init.body) as Record<string, any>;
    const call: Call = { path, body, mono: this.clock.mono(), url };
    this.calls.push(call);
    if (init.signal.aborted) throw new Error("aborted");
    const hooked = this.hook?.(call);
    if (hooked === "refuse") throw new TypeError("fetch failed: connect ECONNREFUSED");
    const ans = hooked ?? this.answer(path, body);
    this.clock.move(this.delayMs);
    return new Response(JSON.stringify(ans.body), { status: ans.status, headers: { "Content-Type": ans.contentType ?? "application/json" } });
  };

  lease(node: number, ms: number): Record<string, unknown> {
    return {
      nodeId: node,
      notBefore: new Date(this.clock.wall - 60_000).toISOString(),
      expiresAt: new Date(this.clock.wall + ms).toISOString(),
      fencingToken: this.token + node,
      receipt: `${this.receipt}-${node}`,
    };
  }

  private answer(path: string, body: Record<string, any>): { status: number; body: unknown; contentType?: string } {
    const key = JSON.stringify(body.requester);
    const now = new Date(this.clock.wall).toISOString();
    switch (path) {
      case "/v1/leases": {
        const nodes = Array.from({ length: body.count as number }, (_, i) => this.firstNode + i);
        this.held.set(key, nodes);
        return { status: 200, body: { layout: this.layout, leases: nodes.map((n) => this.lease(n, this.firstLeaseMs)), serverUtcNow: now } };
      }
      case "/v1/leases/renew": {
        const nodes = this.held.get(key) ?? [];
        return { status: 200, body: { leases: nodes.map((n) => this.lease(n, this.leaseMs)), serverUtcNow: now } };
      }
      case "/v1/leases/remove": {
        const n = this.held.get(key)?.length ?? 0;
        this.held.delete(key);
        return { status: 200, body: { removed: n } };
      }
    }
    return { status: 404, body: { code: "NOT_FOUND" } };
  }
}

/** A problem+json answer. */
export function problem(status: number, code: string): Answer {
  return { status, body: { type: "about:blank", title: code, status, code, detail: code.toLowerCase() }, contentType: "application/problem+json" };
}
