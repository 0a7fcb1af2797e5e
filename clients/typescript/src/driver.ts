/**
 * The conformance driver of the TypeScript client: speaks the line protocol of the
 * conformance suite (issue #33) on stdin and stdout, one JSON object per line, and
 * wraps one Session at a time. Logs go to stderr. Exits 0 after {"op":"quit"} or at
 * the end of stdin.
 *
 * Run: node clients/typescript/dist/driver.js
 */
import { createInterface } from "node:readline";
import { IdKeeperError, InvalidGrantError, LeaseLostError, ServerError } from "./errors.js";
import { breakRule, breaks, type Break } from "./faults.js";
import { formatTime } from "./layout.js";
import { processIdentity } from "./requester.js";
import { Session } from "./session.js";
import type { SessionEvent } from "./config.js";

type Command = { id?: number; op?: string; [k: string]: unknown };

let session: Session | null = null;

function send(msg: Record<string, unknown>): void {
  process.stdout.write(JSON.stringify(msg) + "\n");
}

function onEvent(e: SessionEvent): void {
  switch (e.type) {
    case "renewed":
      send({ ev: "renewed", nodeIds: e.nodeIds, expiresAt: formatTime(e.expiresAtMs) });
      break;
    case "invalid":
      send({ ev: "invalid", reason: e.reason });
      break;
    case "retry":
      send({ ev: "retry", op: e.op, delayMs: Math.round(e.delayMs) });
      break;
  }
}

/** The protocol's code for an error of open(): the server's problem code, else a client code. */
function openCode(err: unknown): string {
  if (err instanceof ServerError) return err.problemCode || "TRANSPORT";
  if (err instanceof InvalidGrantError) return err.reason === "layout" || err.reason === "node-range" ? "LAYOUT_REFUSED" : "NOT_ISSUING";
  if (err instanceof LeaseLostError) return "NOT_ISSUING";
  if (err instanceof IdKeeperError && err.code === "CLOSED") return "CLOSED";
  return "TRANSPORT";
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

async function open(c: Command): Promise<Record<string, unknown>> {
  const brk = (c.break ?? "") as Break;
  if (!breaks.includes(brk)) return { ev: "error", code: "BREAK_UNSUPPORTED", message: `the TypeScript driver has no break ${JSON.stringify(c.break)}` };
  const servers = c.servers as string[];
  let s: Session;
  try {
    s = new Session({
      servers: brk === "first-replica-only" && Array.isArray(servers) ? servers.slice(0, 1) : servers,
      ...(brk === "renew-retry-fast" ? { renewLoopMs: 1_000, minRetryMs: 1_000 } : {}),
      apiKey: String(c.apiKey ?? ""),
      count: typeof c.count === "number" ? c.count : 1,
      requester: { machineId: String(c.machineId ?? processIdentity().machineId), pid: process.pid, startedAtMs: processIdentity().startedAtMs },
      onEvent,
      // The harness reads the loss from the invalid event; the driver must live on to answer it.
      onFatal: () => {},
    });
  } catch (err) {
    return { ev: "error", code: "TRANSPORT", message: message(err) };
  }
  s[breakRule] = brk;
  session = s;
  try {
    await s.open();
  } catch (err) {
    return { ev: "error", code: openCode(err), message: message(err) };
  }
  const l = s.layout!;
  return {
    ev: "opened",
    nodeIds: s.nodeIds,
    layout: { epoch: formatTime(l.epochMs), timestampBits: l.timestampBits, nodeBits: l.nodeBits, sequenceBits: l.sequenceBits },
  };
}

function next(c: Command): Record<string, unknown> {
  const n = Number(c.n);
  if (!Number.isInteger(n) || n < 1 || n > 100_000) return { ev: "error", code: "BAD_COMMAND", message: `n ${JSON.stringify(c.n)} is outside 1..100000` };
  if (!session) return { ev: "error", code: "NOT_ISSUING", message: "no session is open" };
  const ids = new Array<string>(n);
  try {
    const s = session;
    const mint = breakOf(s) === "single-node" ? () => s.nextIdOn(0) : () => s.nextId();
    for (let i = 0; i < n; i++) ids[i] = mint().toString();
  } catch (err) {
    return { ev: "error", code: "NOT_ISSUING", message: message(err) };
  }
  return { ev: "ids", ids };
}

function breakOf(s: Session): Break {
  return s[breakRule];
}

function state(): Record<string, unknown> {
  if (!session) return { ev: "state", issuing: false, nodeIds: [], renewals: 0, leaseRemainingMs: 0 };
  return { ev: "state", issuing: session.check() === null, nodeIds: session.nodeIds, renewals: session.renewals, leaseRemainingMs: Math.floor(session.timeLeftMs) };
}

async function close(): Promise<Record<string, unknown>> {
  if (!session) return { ev: "closed", removed: false };
  const r = await session.close();
  return { ev: "closed", removed: r.removeSent };
}

async function handle(line: string): Promise<void> {
  let c: Command;
  try {
    c = JSON.parse(line) as Command;
  } catch (err) {
    send({ ev: "error", code: "BAD_COMMAND", message: `not JSON: ${message(err)}` });
    return;
  }
  const id = c.id;
  let reply: Record<string, unknown>;
  try {
    switch (c.op) {
      case "open":
        reply = await open(c);
        break;
      case "next":
        reply = next(c);
        break;
      case "state":
        reply = state();
        break;
      case "close":
        reply = await close();
        break;
      case "quit":
        process.stdout.write(JSON.stringify({ id, ev: "bye" }) + "\n", () => process.exit(0));
        return;
      default:
        reply = { ev: "error", code: "BAD_COMMAND", message: `unknown op ${JSON.stringify(c.op)}` };
    }
  } catch (err) {
    reply = { ev: "error", code: "TRANSPORT", message: message(err) };
  }
  send({ id, ...reply });
}

// Node.js loads its fetch implementation at the first call, tens of ms (seconds on a
// loaded machine); loading it before the first reply keeps that out of the time
// limit of the harness's first timed step (an open past a dead replica within 2 s).
const warm: Promise<void> = fetch("data:,")
  .then((r) => r.arrayBuffer())
  .then(
    () => {},
    (err: unknown) => void process.stderr.write(`driver: warming fetch up failed: ${message(err)}\n`),
  );

const pending = new Set<Promise<void>>();
const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on("line", (line) => {
  if (line.trim() === "") return;
  const p = warm.then(() => handle(line)).finally(() => pending.delete(p));
  pending.add(p);
});
// At the end of stdin, the replies under way are written first.
rl.on("close", () => void Promise.allSettled([...pending]).then(() => process.exit(0)));
