// The Session's rules of DESIGN §4 on a fake clock and an in-memory registry: no
// test sleeps; time moves when the test says so.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { SessionEvent, SessionOptions } from "../config.js";
import { IdKeeperError, InvalidGrantError, LeaseLostError, ServerError } from "../errors.js";
import { decodeId, parseTime } from "../layout.js";
import { Session } from "../session.js";
import { FakeClock, FakeRegistry, problem, settle } from "./fakes.js";

const quiet = { info() {}, warn() {}, error() {} };

function setup(opts: Partial<SessionOptions> = {}) {
  const clock = new FakeClock();
  const reg = new FakeRegistry(clock);
  const events: SessionEvent[] = [];
  const fatals: LeaseLostError[] = [];
  const s = new Session({
    servers: "http://registry.test",
    apiKey: "idk_test",
    requester: { machineId: "m1", pid: 42, startedAtMs: Date.UTC(2026, 5, 1) },
    host: "-",
    clock,
    fetch: reg.fetch,
    logger: quiet,
    random: () => 0.5,
    onEvent: (e) => events.push(e),
    onFatal: (e) => fatals.push(e),
    ...opts,
  });
  return { clock, reg, s, events, fatals };
}

async function opened(opts: Partial<SessionOptions> = {}) {
  const t = setup(opts);
  await t.s.open();
  return t;
}

test("open allocates, validates, then renews at once; the requester carries a fresh 22-character instance", async () => {
  const { reg, s, events } = await opened({ count: 2 });
  assert.deepEqual(reg.calledPaths(), ["/v1/leases", "/v1/leases/renew"]);
  const r = reg.calls[0]!.body.requester;
  assert.equal(r.machineId, "m1");
  assert.equal(r.pid, 42);
  assert.match(r.instance, /^[A-Za-z0-9_-]{22}$/);
  assert.deepEqual(reg.calls[1]!.body.requester, r);
  assert.deepEqual(s.nodeIds, [0, 1]);
  assert.equal(s.renewals, 1);
  assert.equal(events.filter((e) => e.type === "renewed").length, 1);
  const other = setup();
  await other.s.open();
  assert.notEqual(other.reg.calls[0]!.body.requester.instance, r.instance, "two sessions share an instance");
});

test("Alloc retries back off 3 s doubling to 60 s, ±20 % jitter, the cap after the jitter, with one instance", async () => {
  const { clock, reg, s, events } = setup({ random: () => 0.999999 });
  let fails = 7;
  reg.hook = (c) => (c.path === "/v1/leases" && fails-- > 0 ? problem(503, "STORE_UNAVAILABLE") : undefined);
  const p = s.open();
  for (let i = 0; i < 8; i++) await clock.advance(60_000);
  await p;
  const delays = events.filter((e) => e.type === "retry").map((e) => Math.round((e as { delayMs: number }).delayMs));
  // 3 s × 2^k × 1.2, and never above 60 s.
  assert.deepEqual(delays, [3600, 7200, 14400, 28800, 57600, 60000, 60000]);
  const instances = new Set(reg.calls.filter((c) => c.path === "/v1/leases").map((c) => c.body.requester.instance));
  assert.equal(instances.size, 1, "the instance changed across Alloc retries");
  const low = setup({ random: () => 0 });
  assert.deepEqual([0, 1, 5, 9].map((a) => Math.round(low.s.backoff(a))), [2400, 4800, 48000, 48000]);
});

test("Alloc is not retried on an answer retrying cannot fix", async () => {
  const { reg, s, events } = setup();
  reg.hook = () => problem(401, "API_KEY_INVALID");
  await assert.rejects(s.open(), (e: unknown) => e instanceof ServerError && e.problemCode === "API_KEY_INVALID" && e.status === 401);
  assert.equal(reg.calls.length, 1);
  assert.equal(events.length, 0);
  assert.equal(s.err?.code, "API_KEY_INVALID");
});

test("renews at half the lease, from the send time", async () => {
  const { clock, reg, s } = await opened();
  const lease = reg.leaseMs;
  await clock.advance(lease / 2 - 1);
  assert.equal(reg.calls.length, 2);
  await clock.advance(1);
  assert.deepEqual(reg.calledPaths().slice(2), ["/v1/leases/renew"]);
  assert.equal(s.renewals, 2);
});

test("a failed Renew is retried at min(10 min, left / 4), at least 5 s; receipts go with every Renew", async () => {
  const { clock, reg, events } = await opened();
  reg.hook = (c) => (c.path === "/v1/leases/renew" ? problem(503, "STORE_UNAVAILABLE") : undefined);
  await clock.advance(reg.leaseMs / 2);
  const delays = (t: SessionEvent[]) => t.filter((e) => e.type === "retry").map((e) => (e as { delayMs: number }).delayMs);
  assert.deepEqual(delays(events), [600_000], "a 48 h lease: the 10 min cap");
  for (const c of reg.calls.filter((c) => c.path === "/v1/leases/renew")) {
    assert.deepEqual(c.body.receipts, ["rcpt-0"]);
    assert.deepEqual(c.body.fencingTokens, [9]);
  }
  // A lease of one minute: a quarter of what is left, never under 5 s.
  const short = setup();
  short.reg.leaseMs = 60_000;
  await short.s.open();
  short.reg.hook = (c) => (c.path === "/v1/leases/renew" ? "refuse" : undefined);
  await short.clock.advance(30_000 + 7_500 + 5_625 + 5_000);
  assert.deepEqual(delays(short.events), [7_500, 5_625, 5_000, 5_000]);
});

for (const [name, answer, reason] of [
  ["200 with an empty list", { leases: [] }, "empty-renew"],
  ["fewer leases than generators", { leases: "one" }, "count-mismatch"],
  ["another fencing token", { leases: "token" }, "lease-lost"],
  ["a lease already expired by the local clock", { leases: "expired" }, "expired-on-arrival"],
] as const) {
  test(`Renew answering ${name} stops issuing at once and reports fatal (${reason})`, async () => {
    const { clock, reg, s, events, fatals } = await opened({ count: 2 });
    assert.ok(s.nextId() > 0n);
    reg.hook = (c) => {
      if (c.path !== "/v1/leases/renew") return undefined;
      const now = new Date(clock.wall).toISOString();
      const leases =
        answer.leases === "one" ? [reg.lease(0, reg.leaseMs)] : answer.leases === "token" ? [reg.lease(0, reg.leaseMs), { ...reg.lease(1, reg.leaseMs), fencingToken: 99 }] : answer.leases === "expired" ? [reg.lease(0, -5), reg.lease(1, -5)] : [];
      return { status: 200, body: { leases, serverUtcNow: now } };
    };
    await clock.advance(reg.leaseMs / 2);
    assert.throws(() => s.nextId(), (e: unknown) => e instanceof LeaseLostError && e.reason === reason);
    assert.equal(fatals.length, 1);
    assert.equal(fatals[0]!.reason, reason);
    assert.deepEqual(
      events.filter((e) => e.type === "invalid").map((e) => (e as { reason: string }).reason),
      [reason],
    );
    const r = await s.close();
    assert.equal(r.removeSent, false, "Remove sent for an invalid lease");
    assert.equal(reg.calls.at(-1)!.path, "/v1/leases/renew");
  });
}

test("lease expiry on the monotonic clock stops issuing at once, before any timer runs", async () => {
  const { clock, reg, s, events, fatals } = await opened();
  reg.hook = () => "refuse";
  clock.move(reg.leaseMs - 1);
  assert.ok(s.nextId() > 0n);
  clock.move(1); // no timer has run: issuing checks the deadline itself
  assert.throws(() => s.nextId(), (e: unknown) => e instanceof LeaseLostError && e.reason === "expired");
  assert.equal(s.check()?.code, "LEASE_LOST");
  await settle();
  assert.equal(fatals.length, 1);
  assert.deepEqual(
    events.filter((e) => e.type === "invalid").map((e) => (e as { reason: string }).reason),
    ["expired"],
  );
});

test("the lease deadline counts from the send time: a slow answer shortens the lease", async () => {
  const { s, reg } = await opened();
  const before = s.timeLeftMs;
  assert.equal(before, reg.leaseMs);
  const slow = setup();
  slow.reg.delayMs = 4_000;
  await slow.s.open();
  // The first Renew's answer took 4 s to arrive: the lease counts from its send time.
  assert.equal(slow.s.timeLeftMs, slow.reg.leaseMs - 4_000);
});

test("a grant that arrives after its lease ran out is refused and released", async () => {
  const { reg, s, events } = setup();
  reg.delayMs = reg.firstLeaseMs + 1;
  await assert.rejects(s.open(), (e: unknown) => e instanceof InvalidGrantError && e.reason === "expired-on-arrival");
  assert.deepEqual(reg.calledPaths(), ["/v1/leases", "/v1/leases/remove"]);
  assert.equal(reg.calls[1]!.body.mintedUpTo, undefined);
  assert.equal((events[0] as { reason: string }).reason, "expired-on-arrival");
});

for (const [name, layout, fault] of [
  ["widths not adding up to 63", { timestampBits: 41, nodeBits: 12, sequenceBits: 11 }, "layout"],
  ["a zero width", { timestampBits: 51, nodeBits: 12, sequenceBits: 0 }, "layout"],
  ["a node ID outside the node field", { timestampBits: 51, nodeBits: 2, sequenceBits: 10 }, "node-range"],
] as const) {
  test(`the layout from the server is checked: ${name}`, async () => {
    const { reg, s, events } = setup();
    reg.firstNode = 5;
    reg.layout = { epoch: "2026-01-01T00:00:00.000Z", ...layout };
    await assert.rejects(s.open(), (e: unknown) => e instanceof InvalidGrantError && e.reason === fault);
    assert.equal(reg.calls.at(-1)!.path, "/v1/leases/remove");
    assert.equal((events[0] as { reason: string }).reason, "layout");
  });
}

test("IDs ascend per node ID, round robin over the node IDs, and never outside the window", async () => {
  const { clock, s } = await opened({ count: 3 });
  const ids = Array.from({ length: 3000 }, () => s.nextId());
  const byNode = new Map<number, bigint[]>();
  for (const id of ids) {
    const n = decodeId(id).nodeId;
    byNode.set(n, [...(byNode.get(n) ?? []), id]);
  }
  assert.deepEqual([...byNode.keys()].sort(), [0, 1, 2]);
  assert.deepEqual(ids.slice(0, 6).map((id) => decodeId(id).nodeId), [0, 1, 2, 0, 1, 2]);
  for (const list of byNode.values()) for (let i = 1; i < list.length; i++) assert.ok(list[i]! > list[i - 1]!);
  assert.equal(new Set(ids).size, ids.length);
  const batch = s.nextIds(5000);
  assert.equal(new Set(batch).size, 5000);
  for (let i = 1; i < batch.length; i++) assert.ok(batch[i]! > batch[i - 1]!, "nextIds not ascending");
  // The wall clock past expiresAt (the monotonic deadline not yet: a clock step forward).
  clock.stepWall(49 * 3_600_000);
  assert.throws(() => s.nextId(), (e: unknown) => e instanceof IdKeeperError && e.code === "WINDOW_ENDED");
});

test("close sends Remove with mintedUpTo after the drain; once only; issuing is CLOSED", async () => {
  const { reg, s } = await opened();
  const id = s.nextId();
  const r = await s.close();
  assert.deepEqual(r, { removeSent: true, released: 1, error: null });
  const rm = reg.calls.at(-1)!;
  assert.equal(rm.path, "/v1/leases/remove");
  assert.equal(parseTime(rm.body.mintedUpTo), decodeId(id).timeMs);
  assert.deepEqual(await s.close(), r);
  assert.equal(reg.calls.filter((c) => c.path === "/v1/leases/remove").length, 1);
  assert.throws(() => s.nextId(), (e: unknown) => e instanceof IdKeeperError && e.code === "CLOSED");
  assert.equal((await s.done).code, "CLOSED");
  const idle = await opened();
  await idle.s.close();
  assert.equal(idle.reg.calls.at(-1)!.body.mintedUpTo, undefined, "mintedUpTo sent though nothing was minted");
});

test("close during open's Alloc retries stops them and sends nothing more", async () => {
  const { clock, reg, s } = setup();
  reg.hook = () => problem(503, "STORE_UNAVAILABLE");
  const p = s.open();
  await clock.advance(1_000);
  const r = await s.close();
  await assert.rejects(p, (e: unknown) => e instanceof IdKeeperError && e.code === "CLOSED");
  assert.equal(r.removeSent, false);
  const n = reg.calls.length;
  await clock.advance(120_000);
  assert.equal(reg.calls.length, n);
});

test("replicas: a refused or 5xx replica moves the call to the next, a 4xx does not", async () => {
  const { reg, s } = setup({ servers: ["http://a.test", "http://b.test"] });
  reg.hook = (c) => (c.url.startsWith("http://a.test") ? "refuse" : undefined);
  await s.open();
  assert.deepEqual(
    reg.calls.map((c) => new URL(c.url).host),
    ["a.test", "b.test", "b.test"],
  );
  const t = setup({ servers: ["http://a.test", "http://b.test"] });
  t.reg.hook = (c) => (c.url.startsWith("http://a.test") ? problem(403, "IP_NOT_ALLOWED") : undefined);
  await assert.rejects(t.s.open(), (e: unknown) => e instanceof ServerError && e.problemCode === "IP_NOT_ALLOWED");
  assert.equal(t.reg.calls.length, 1);
});

test("a malformed 200 proves nothing: Renew retries", async () => {
  const { clock, reg, s, fatals } = await opened();
  reg.hook = (c) => (c.path === "/v1/leases/renew" ? { status: 200, body: { leases: [{ nodeId: 0 }] } } : undefined);
  await clock.advance(reg.leaseMs / 2);
  assert.equal(fatals.length, 0);
  assert.ok(s.nextId() > 0n);
  assert.equal(s.renewals, 1);
});

test("options are checked", () => {
  assert.throws(() => new Session({ servers: [], apiKey: "k" }), /servers is required/);
  assert.throws(() => new Session({ servers: "ftp://x", apiKey: "k" }), /not an http/);
  assert.throws(() => new Session({ servers: ["http://a", "http://a/"], apiKey: "k" }), /twice/);
  assert.throws(() => new Session({ servers: "http://a", apiKey: "" }), /apiKey/);
  assert.throws(() => new Session({ servers: "http://a", apiKey: "k", count: 4097 }), /count/);
});
