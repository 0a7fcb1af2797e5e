// Against a real registry with leases of seconds (`idkeeper server
// --unsafe-short-leases`, test only): renewals at half the lease in real time, and
// a registry that stops answering (SIGSTOP) ends issuing at the lease deadline.
import assert from "node:assert/strict";
import { spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import type { SessionEvent } from "../config.js";
import { LeaseLostError } from "../errors.js";
import { Session } from "../session.js";
import { idkeeperBin, startProcess } from "./procs.js";

const apiKey = "idk_ts_client_short_lease_test_key";
const quiet = { info() {}, warn() {}, error() {} };
let dir = "";
let server: ChildProcess | null = null;
let registry = "";

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "idkeeper-ts-short-"));
  const bin = idkeeperBin(dir);
  const store = `bolt:${join(dir, "idkeeper.db")}`;
  const init = spawnSync(bin, ["init", "--store", store], { stdio: ["ignore", "ignore", "pipe"] });
  assert.equal(init.status, 0, `idkeeper init: ${init.stderr}`);
  const args = ["server", "--unsafe-short-leases", "--store", store, "--listen", "127.0.0.1:0", "--first-lease", "2s", "--lease-duration", "3s", "--cleanup-grace", "0s"];
  const { proc, found } = await startProcess(bin, args, { IDKEEPER_BOOTSTRAP_API_KEY: apiKey }, [/msg=listening addr=(\S+)/]);
  server = proc;
  registry = `http://${found[0]}`;
});

after(() => {
  if (server && server.exitCode === null) {
    server.kill("SIGCONT");
    server.kill("SIGTERM");
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("renews at half a 3 s lease in real time and keeps issuing", async () => {
  const s = new Session({ servers: registry, apiKey, logger: quiet, onFatal: () => assert.fail("fatal") });
  await s.open();
  assert.ok(s.timeLeftMs > 2_500 && s.timeLeftMs <= 3_000, `timeLeft ${s.timeLeftMs}`);
  await sleep(4_000);
  assert.ok(s.renewals >= 2, `renewals ${s.renewals} in 4 s`); // at once, then every 1.5 s
  assert.ok(s.nextId() > 0n);
  assert.equal((await s.close()).released, 1);
});

test("a registry that stops answering ends issuing at the lease deadline, and close sends no Remove", async () => {
  const events: SessionEvent[] = [];
  const fatals: LeaseLostError[] = [];
  const s = new Session({ servers: registry, apiKey, logger: quiet, requestTimeoutMs: 500, minRetryMs: 200, onEvent: (e) => events.push(e), onFatal: (e) => fatals.push(e) });
  await s.open();
  server!.kill("SIGSTOP");
  try {
    const start = performance.now();
    const left = s.timeLeftMs;
    let lastOk = 0;
    let stopped = NaN;
    while (performance.now() - start < left + 3_000) {
      try {
        s.nextId();
        lastOk = performance.now() - start;
      } catch (err) {
        assert.ok(err instanceof LeaseLostError && err.reason === "expired", String(err));
        stopped = performance.now() - start;
        break;
      }
      await sleep(10);
    }
    // Never an ID after the deadline (the margin: the clock read after the call, on a busy machine); and issuing
    // stops at it, however late a timer runs.
    assert.ok(lastOk <= left + 50, `an ID ${lastOk} ms after the start, the lease had ${left} ms`);
    assert.ok(stopped < left + 1_500, `issuing stopped after ${stopped} ms, the lease had ${left} ms`);
    await sleep(50);
    assert.equal(fatals.length, 1);
    assert.ok(events.some((e) => e.type === "retry" && e.op === "renew"), "no renew retry reported");
    assert.ok(events.some((e) => e.type === "invalid" && e.reason === "expired"));
  } finally {
    server!.kill("SIGCONT");
  }
  assert.equal((await s.close()).removeSent, false);
});
