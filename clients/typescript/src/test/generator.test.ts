// The generator on a fake clock: ascending IDs, the window, the sequence's end,
// clock steps back; and the conformance breaks, each of which must change what the
// Session does.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { SessionEvent } from "../config.js";
import { IdKeeperError } from "../errors.js";
import { breakRule, type Break } from "../faults.js";
import { NodeGenerator } from "../generator.js";
import { decodeId, defaultLayout, parseTime, formatTime } from "../layout.js";
import { Session } from "../session.js";
import { FakeClock, FakeRegistry } from "./fakes.js";

const code = (c: string) => (e: unknown) => e instanceof IdKeeperError && e.code === c;

test("a used-up millisecond waits for the next one; IDs strictly ascend and decode to the clock", () => {
  const clock = new FakeClock();
  const g = new NodeGenerator(defaultLayout, 17, clock);
  const start = clock.now();
  const ids = Array.from({ length: 3000 }, () => g.next());
  for (let i = 1; i < ids.length; i++) assert.ok(ids[i]! > ids[i - 1]!);
  const d = decodeId(ids[1024]!);
  assert.equal(d.nodeId, 17);
  assert.equal(d.sequence, 0);
  assert.equal(d.timeMs, start + 1, "the 1025th ID is not in the next millisecond");
  assert.ok(clock.now() >= start + 2, "minted ahead of the clock");
  assert.equal(g.mintedUpTo(), decodeId(ids.at(-1)!).timeMs);
  const out: bigint[] = [];
  g.fill(out, 0, 2500);
  assert.ok(out[0]! > ids.at(-1)!);
  for (let i = 1; i < out.length; i++) assert.ok(out[i]! > out[i - 1]!);
});

test("the window: before notBefore (cooling) and after expiresAt nothing is minted", () => {
  const clock = new FakeClock();
  const g = new NodeGenerator(defaultLayout, 1, clock);
  g.setWindow(clock.now() + 10.5, clock.now() + 20);
  assert.throws(() => g.next(), code("BEFORE_WINDOW"));
  clock.move(10);
  assert.throws(() => g.next(), code("BEFORE_WINDOW"), "notBefore is rounded up");
  clock.move(1);
  assert.ok(g.next() > 0n);
  clock.move(9);
  assert.ok(g.next() > 0n, "expiresAt is inclusive");
  clock.move(1);
  assert.throws(() => g.next(), code("WINDOW_ENDED"));
});

test("a small step back mints at logical time; past maxBackwardStepMs it refuses", () => {
  const clock = new FakeClock();
  const g = new NodeGenerator(defaultLayout, 1, clock, { maxBackwardStepMs: 100 });
  const a = g.next();
  clock.stepWall(-50);
  const b = g.next();
  assert.ok(b > a);
  assert.equal(decodeId(b).timeMs, decodeId(a).timeMs, "not minted at the last timestamp");
  clock.stepWall(-100);
  assert.throws(() => g.next(), code("CLOCK_BACKWARDS"));
  assert.equal(g.clockError()?.code, "CLOCK_BACKWARDS");
  clock.stepWall(150);
  assert.ok(g.next() > b);
});

test("times: RFC 3339 with offsets and fractions; the API's own form back", () => {
  assert.equal(parseTime("2026-01-01T01:00:00.5+01:00"), Date.UTC(2026, 0, 1) + 500);
  // A fraction below the millisecond is kept (to about 0.2 µs), so a window's start rounds up.
  assert.equal(Math.ceil(parseTime("2026-01-01T00:00:00.000001Z")), Date.UTC(2026, 0, 1) + 1);
  assert.equal(formatTime(Date.UTC(2026, 0, 1) + 1.9), "2026-01-01T00:00:00.001Z");
  for (const bad of ["2026-02-30T00:00:00Z", "2026-01-01 00:00:00Z", "2026-01-01T00:00:00", ""]) assert.throws(() => parseTime(bad));
});

/** Runs one scenario with and without a break: the two must differ. */
async function both(brk: Break, scenario: (s: Session, reg: FakeRegistry, clock: FakeClock, events: SessionEvent[]) => Promise<unknown>) {
  const out: unknown[] = [];
  for (const b of ["", brk] as Break[]) {
    const clock = new FakeClock();
    const reg = new FakeRegistry(clock);
    const events: SessionEvent[] = [];
    const s = new Session({ servers: "http://r.test", apiKey: "k", host: "-", clock, fetch: reg.fetch, random: () => 0.5, logger: { info() {}, warn() {}, error() {} }, onFatal() {}, onEvent: (e) => events.push(e), count: 2 });
    s[breakRule] = b;
    out.push(await scenario(s, reg, clock, events));
  }
  assert.notDeepEqual(out[0], out[1], `break ${brk} changed nothing`);
  return out;
}

const issues = (s: Session) => {
  try {
    s.nextId();
    return true;
  } catch {
    return false;
  }
};

test("every conformance break changes the Session's behaviour", async () => {
  const renewAnswer = (reg: FakeRegistry, clock: FakeClock, leases: unknown[]) => {
    reg.hook = (c) => (c.path === "/v1/leases/renew" ? { status: 200, body: { leases, serverUtcNow: new Date(clock.wall).toISOString() } } : undefined);
  };
  await both("ignore-empty-renew", async (s, reg, clock) => {
    await s.open();
    renewAnswer(reg, clock, []);
    await clock.advance(reg.leaseMs / 2);
    return issues(s);
  });
  await both("ignore-count-mismatch", async (s, reg, clock) => {
    await s.open();
    renewAnswer(reg, clock, [reg.lease(0, reg.leaseMs)]);
    await clock.advance(reg.leaseMs / 2);
    return issues(s);
  });
  await both("ignore-expiry", async (s, reg, clock) => {
    await s.open();
    reg.hook = () => "refuse";
    clock.move(reg.leaseMs + 1);
    return issues(s);
  });
  await both("deadline-from-receive", async (s, reg) => {
    reg.delayMs = 3_000;
    await s.open();
    return s.timeLeftMs;
  });
  await both("no-backoff", async (s, reg, clock, events) => {
    let n = 2;
    reg.hook = (c) => (c.path === "/v1/leases" && n-- > 0 ? "refuse" : undefined);
    const p = s.open();
    await clock.advance(20_000);
    await p;
    return events.filter((e) => e.type === "retry").map((e) => (e as { delayMs: number }).delayMs);
  });
  await both("remove-without-minted", async (s, reg) => {
    await s.open();
    s.nextId();
    await s.close();
    return reg.calls.at(-1)!.body.mintedUpTo === undefined;
  });
  await both("remove-when-invalid", async (s, reg, clock) => {
    await s.open();
    renewAnswer(reg, clock, []);
    await clock.advance(reg.leaseMs / 2);
    return (await s.close()).removeSent;
  });
});
