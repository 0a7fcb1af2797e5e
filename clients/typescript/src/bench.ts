/**
 * The Node generator's throughput against one node ID's ceiling (docs/benchmarks.md):
 * mints with one NodeGenerator on the default layout for a few seconds, one ID per
 * call (next) and in batches (fill), then through a Session's nextId (the lease
 * deadline checked on every call; the registry answered by an in-process stand-in),
 * on the system clock, and prints IDs/s and the share of the ceiling (1,024,000 IDs/s).
 *
 * Run: node dist/bench.js [seconds per run, default 3] [runs, default 3]
 */
import { systemClock } from "./clock.js";
import { Session } from "./session.js";
import type { Fetch } from "./wire.js";
import { NodeGenerator } from "./generator.js";
import { defaultLayout, idsPerSecond } from "./layout.js";

const seconds = Number(process.argv[2] ?? 3);
const runs = Number(process.argv[3] ?? 3);
const ceiling = idsPerSecond(defaultLayout);

function report(name: string, r: number, n: number, took: number): void {
  const rate = n / took;
  console.log(`${name}\trun ${r + 1}\t${Math.round(rate).toLocaleString("en")} IDs/s\t${((rate / ceiling) * 100).toFixed(1)} % of ${ceiling.toLocaleString("en")}`);
}

function run(name: string, mint: (g: NodeGenerator) => number): void {
  for (let r = 0; r < runs; r++) {
    const g = new NodeGenerator(defaultLayout, 7, systemClock);
    let n = 0;
    const start = performance.now();
    const end = start + seconds * 1000;
    while (performance.now() < end) n += mint(g);
    report(name, r, n, (performance.now() - start) / 1000);
  }
}

let sink = 0n;
run("NodeGenerator.next()", (g) => {
  for (let i = 0; i < 1000; i++) sink ^= g.next();
  return 1000;
});
const buf = new Array<bigint>(1024);
run("NodeGenerator.fill(1024)", (g) => {
  g.fill(buf, 0, 1024);
  return 1024;
});

/** Answers Alloc and Renew with one lease of an hour on node ID 7, Remove with 1. */
const standIn: Fetch = async (url) => {
  const now = new Date();
  const lease = { nodeId: 7, notBefore: "2026-01-01T00:00:00.000Z", expiresAt: new Date(now.getTime() + 3_600_000).toISOString(), fencingToken: 1 };
  const body = url.endsWith("/remove")
    ? { removed: 1 }
    : { layout: { epoch: "2026-01-01T00:00:00.000Z", timestampBits: 41, nodeBits: 12, sequenceBits: 10 }, leases: [lease], serverUtcNow: now.toISOString() };
  return new Response(JSON.stringify(body), { status: 200, headers: { "Content-Type": "application/json" } });
};
for (let r = 0; r < runs; r++) {
  const s = await Session.start({ servers: "http://stand-in.invalid", apiKey: "bench", fetch: standIn, host: "-" });
  let n = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
  while (performance.now() < end) {
    for (let i = 0; i < 1000; i++) sink ^= s.nextId();
    n += 1000;
  }
  report("Session.nextId()", r, n, (performance.now() - start) / 1000);
  await s.close();
}

// The cost of a call, where the clock is not the limit: a layout of 16 sequence bits (65,536,000 IDs/s a node ID).
const wide = { epochMs: Date.UTC(2026, 0, 1), timestampBits: 41, nodeBits: 6, sequenceBits: 16 };
const wideIn: Fetch = async (url, init) => {
  const a = await standIn(url, init);
  const body = (await a.json()) as Record<string, any>;
  if (body.layout) body.layout = { ...body.layout, nodeBits: 6, sequenceBits: 16 };
  return new Response(JSON.stringify(body), { status: 200 });
};
for (let r = 0; r < runs; r++) {
  const g = new NodeGenerator(wide, 7, systemClock);
  const s = await Session.start({ servers: "http://stand-in.invalid", apiKey: "bench", fetch: wideIn, host: "-" });
  const n = 2_000_000;
  let t = performance.now();
  for (let i = 0; i < n; i++) sink ^= g.next();
  const gen = ((performance.now() - t) / n) * 1e6;
  t = performance.now();
  for (let i = 0; i < n; i++) sink ^= s.nextId();
  const ses = ((performance.now() - t) / n) * 1e6;
  console.log(`per call, 16 sequence bits\trun ${r + 1}\tNodeGenerator.next() ${gen.toFixed(0)} ns\tSession.nextId() ${ses.toFixed(0)} ns`);
  await s.close();
}
if (sink === -1n) console.log(sink);
