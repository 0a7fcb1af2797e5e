// Against a real registry: `idkeeper dev` on loopback ports of its own, the
// binary taken from IDKEEPER_BIN or built once with `go build` into a temporary
// directory. Also drives dist/driver.js through the conformance line protocol.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, test } from "node:test";
import { IdKeeperError, ServerError } from "../errors.js";
import { decodeId } from "../layout.js";
import { Session } from "../session.js";
import { here, idkeeperBin, startProcess } from "./procs.js";

const quiet = { info() {}, warn() {}, error() {} };
let dir = "";
let dev: ChildProcess | null = null;
let registry = "";
let apiKey = "";

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "idkeeper-ts-"));
  const args = ["dev", "--data", join(dir, "data"), "--listen", "127.0.0.1:0", "--gateway-listen", "127.0.0.1:0"];
  const { proc, found } = await startProcess(idkeeperBin(dir), args, { IDKEEPER_ADMIN_PASSWORD: "ts-client-test-password" }, [
    /^\s*registry\s+(http:\/\/\S+)/,
    /^\s*API key\s+(\S+)/,
  ]);
  dev = proc;
  [registry, apiKey] = found as [string, string];
});

after(() => {
  dev?.kill("SIGTERM");
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function session(extra: Partial<ConstructorParameters<typeof Session>[0]> = {}): Session {
  return new Session({ servers: registry, apiKey, logger: quiet, onFatal: () => assert.fail("fatal"), ...extra });
}

test("a session leases two node IDs, renews at once, mints unique ascending IDs with them, and releases them", async () => {
  const s = session({ count: 2 });
  await s.open();
  assert.equal(s.nodeIds.length, 2);
  assert.deepEqual(s.layout, { epochMs: Date.UTC(2026, 0, 1), timestampBits: 41, nodeBits: 12, sequenceBits: 10 });
  assert.equal(s.renewals, 1);
  assert.ok(s.timeLeftMs > 47 * 3_600_000, `the renewed lease is short: ${s.timeLeftMs} ms`);
  assert.equal(s.check(), null);
  const ids = s.nextIds(5000);
  for (let i = 1; i < ids.length; i++) assert.ok(ids[i]! > ids[i - 1]!);
  const nodes = new Set(ids.map((id) => decodeId(id, s.layout!).nodeId));
  assert.deepEqual([...nodes].sort(), [...s.nodeIds].sort());
  assert.match(s.nextIdString(), /^\d{18,19}$/);
  const r = await s.close();
  assert.equal(r.released, 2);
  assert.throws(() => s.nextId(), (e: unknown) => e instanceof IdKeeperError && e.code === "CLOSED");
});

test("two sessions of one process are two requesters: other instances, other node IDs", async () => {
  const [a, b] = [session(), session()];
  await Promise.all([a.open(), b.open()]);
  assert.notEqual(a.requester!.instance, b.requester!.instance);
  assert.notDeepEqual(a.nodeIds, b.nodeIds);
  await Promise.all([a.close(), b.close()]);
});

test("a list of replicas: an unreachable first one moves the calls to the next", async () => {
  const s = session({ servers: ["http://127.0.0.1:1", registry], requestTimeoutMs: 2_000 });
  await s.open();
  assert.ok(s.nextId() > 0n);
  assert.equal((await s.close()).released, 1);
});

test("a wrong API key is refused at once with the server's code", async () => {
  const s = session({ apiKey: "idk_wrong_wrong_wrong_wrong_wrong" });
  await assert.rejects(s.open(), (e: unknown) => e instanceof ServerError && e.status === 401 && e.problemCode === "API_KEY_INVALID");
});

test("the driver speaks the conformance protocol", async () => {
  const drv = spawn(process.execPath, [join(here, "..", "driver.js")], { stdio: ["pipe", "pipe", "pipe"] });
  drv.stderr!.resume();
  const replies = createInterface({ input: drv.stdout! })[Symbol.asyncIterator]();
  const ask = async (cmd: Record<string, unknown>): Promise<Record<string, any>> => {
    drv.stdin!.write(JSON.stringify(cmd) + "\n");
    for (;;) {
      const { value, done } = await replies.next();
      assert.ok(!done, "the driver ended early");
      const m = JSON.parse(value as string) as Record<string, any>;
      if (m.id === cmd.id) return m;
    }
  };
  const o = await ask({ id: 1, op: "open", servers: [registry], apiKey, count: 2, machineId: "ts-m1", leaseHint: null, break: "" });
  assert.equal(o.ev, "opened", JSON.stringify(o));
  assert.equal(o.nodeIds.length, 2);
  assert.deepEqual(o.layout, { epoch: "2026-01-01T00:00:00.000Z", timestampBits: 41, nodeBits: 12, sequenceBits: 10 });
  const n = await ask({ id: 2, op: "next", n: 6 });
  assert.equal(n.ev, "ids");
  assert.deepEqual(n.ids.map((id: string) => decodeId(id).nodeId), [...o.nodeIds, ...o.nodeIds, ...o.nodeIds]);
  const st = await ask({ id: 3, op: "state" });
  assert.equal(st.issuing, true);
  assert.equal(st.renewals, 1);
  assert.ok(st.leaseRemainingMs > 0);
  assert.deepEqual(await ask({ id: 4, op: "close" }), { id: 4, ev: "closed", removed: true });
  assert.equal((await ask({ id: 5, op: "next", n: 1 })).code, "NOT_ISSUING");
  assert.deepEqual(await ask({ id: 6, op: "quit" }), { id: 6, ev: "bye" });
  const code = await new Promise((r) => drv.on("exit", r));
  assert.equal(code, 0);
});
