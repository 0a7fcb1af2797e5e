/**
 * The real registry for the tests: the idkeeper binary (IDKEEPER_BIN, else built
 * once per test file with go build) and its processes on loopback ports of their own.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "../../../..");

/** The idkeeper binary: IDKEEPER_BIN, else built into dir. */
export function idkeeperBin(dir: string): string {
  if (process.env.IDKEEPER_BIN) return process.env.IDKEEPER_BIN;
  const bin = join(dir, "idkeeper");
  const b = spawnSync("go", ["build", "-o", bin, "./cmd/idkeeper"], { cwd: repo, stdio: ["ignore", "inherit", "inherit"] });
  assert.equal(b.status, 0, "go build ./cmd/idkeeper failed");
  return bin;
}

/**
 * Starts bin with args and waits until every pattern has matched a line of its
 * stdout or stderr; returns the process and each pattern's first group.
 */
export async function startProcess(bin: string, args: string[], env: Record<string, string>, patterns: RegExp[]): Promise<{ proc: ChildProcess; found: string[] }> {
  const proc = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
  const found: string[] = patterns.map(() => "");
  let log = "";
  await new Promise<void>((ok, fail) => {
    const t = setTimeout(() => fail(new Error(`${args[0]} did not start in 30 s:\n${log}`)), 30_000);
    const onLine = (l: string) => {
      log += l + "\n";
      patterns.forEach((p, i) => {
        const m = p.exec(l);
        if (m && !found[i]) found[i] = m[1]!;
      });
      if (found.every((f) => f !== "")) {
        clearTimeout(t);
        ok();
      }
    };
    createInterface({ input: proc.stdout! }).on("line", onLine);
    createInterface({ input: proc.stderr! }).on("line", onLine);
    proc.on("exit", (code) => fail(new Error(`${args[0]} exited ${code}:\n${log}`)));
  });
  return { proc, found };
}
