import { hostname } from "node:os";
import { systemClock, type Clock } from "./clock.js";
import { IdKeeperError, type LeaseLostError, type LossReason } from "./errors.js";
import { defaultMaxBackwardStepMs } from "./generator.js";
import { identityProblem, type ProcessIdentity } from "./requester.js";
import type { Fetch } from "./wire.js";

/** Where the session's logs go. fields are structured attributes; nothing secret is logged. */
export interface Logger {
  debug?(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/** What a session reports as it goes (SessionOptions.onEvent): for metrics, tests and the conformance driver. */
export type SessionEvent =
  /** A Renew succeeded; expiresAtMs is the earliest expiry of the leases held. */
  | { type: "renewed"; nodeIds: number[]; expiresAtMs: number }
  /** The session stopped issuing (or, for "layout", never started) for a rule of DESIGN §4. */
  | { type: "invalid"; reason: LossReason | "layout"; error: IdKeeperError }
  /** A failed Alloc or Renew is tried again after delayMs. */
  | { type: "retry"; op: "alloc" | "renew"; delayMs: number; error: unknown };

/** Options of a Session. Only servers and apiKey are required; every other one has the default shown. */
export interface SessionOptions {
  /**
   * The registry's base URL, or the base URLs of several replicas of one
   * deployment (1..16 distinct http(s) URLs). A request goes to the replica that
   * answered last and moves on to the next on a transport error or a 5xx, never on
   * another answer.
   */
  servers: string | readonly string[];
  /** Sent as X-API-Key on every request. */
  apiKey: string;
  /** Node IDs (generators) to lease: 1, at most 4096. Each is good for 1,024,000 IDs/s on the default layout. */
  count?: number;
  /** The process identity: processIdentity(). Whatever it is, the session adds a fresh random instance of its own. */
  requester?: ProcessIdentity;
  /** Host name sent with Alloc for the lease history: os.hostname(); "-" sends none. */
  host?: string;
  /** Labels sent with Alloc for the lease history, e.g. {service: "orders"}: at most 16. */
  labels?: Record<string, string>;
  /** Bounds one request to one replica: 10 000 ms. A request that runs out of it is a transport error (retried). */
  requestTimeoutMs?: number;
  /** Caps the interval between Renew retries: 600 000 ms (10 min). */
  renewLoopMs?: number;
  /** The shortest interval between Renew retries: 5 000 ms. */
  minRetryMs?: number;
  /**
   * Alloc's backoff: retry k (from 0) waits b × (1 ± jitter), b = min(max, initial ×
   * multiplier^k), and never longer than max: the cap applies after the jitter too.
   * Defaults 3 000 ms, 60 000 ms, 2 and 0.2; a negative jitter turns it off.
   */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  backoffMultiplier?: number;
  backoffJitter?: number;
  /** How far the wall clock may step back while the generators mint at logical time: 5 000 ms; negative tolerates none. */
  maxBackwardStepMs?: number;
  /** Called once, after open() has succeeded, when the lease is lost; issuing is already blocked. Default: log and process.exit(1). */
  onFatal?: (err: LeaseLostError) => void;
  /** Called for every SessionEvent, synchronously; must not throw. */
  onEvent?: (e: SessionEvent) => void;
  /** The session's logs: lines on stderr, info and above. */
  logger?: Logger;
  /** The time source: systemClock. Tests inject a fake. */
  clock?: Clock;
  /** Sends the requests: the global fetch. Tests inject a fake. */
  fetch?: Fetch;
  /** The backoff's uniform draw in [0, 1): Math.random. */
  random?: () => number;
}

/** The options with every default filled in and checked. */
export interface Settings {
  urls: string[];
  apiKey: string;
  count: number;
  requester: ProcessIdentity | undefined;
  client: { host?: string; labels?: Record<string, string> } | undefined;
  requestTimeoutMs: number;
  renewLoopMs: number;
  minRetryMs: number;
  backoffInitialMs: number;
  backoffMaxMs: number;
  backoffMultiplier: number;
  backoffJitter: number;
  maxBackwardStepMs: number;
  onFatal: (err: LeaseLostError) => void;
  onEvent: (e: SessionEvent) => void;
  log: Logger;
  clock: Clock;
  fetch: Fetch;
  random: () => number;
}

const maxCount = 4096;
const maxServers = 16;

function configError(msg: string): IdKeeperError {
  return new IdKeeperError("CONFIG", `idkeeper client: ${msg}`);
}

/** Checks the options and fills in the defaults; throws a CONFIG IdKeeperError. Does no I/O but reading the host name. */
export function settings(o: SessionOptions): Settings {
  const raw = typeof o.servers === "string" ? [o.servers] : [...(o.servers ?? [])];
  if (raw.length === 0) throw configError("servers is required");
  if (raw.length > maxServers) throw configError(`servers names ${raw.length} URLs, at most ${maxServers}`);
  const urls: string[] = [];
  for (const u of raw) {
    let p: URL;
    try {
      p = new URL(u);
    } catch {
      throw configError(`server ${JSON.stringify(u)} is not an http(s) URL`);
    }
    if ((p.protocol !== "http:" && p.protocol !== "https:") || p.host === "") throw configError(`server ${JSON.stringify(u)} is not an http(s) URL`);
    const base = u.replace(/\/+$/, "");
    if (urls.includes(base)) throw configError(`servers names ${JSON.stringify(u)} twice`);
    urls.push(base);
  }
  if (!o.apiKey) throw configError("apiKey is required");
  const count = o.count ?? 1;
  if (!Number.isInteger(count) || count < 1 || count > maxCount) throw configError(`count ${count} is outside 1..${maxCount}`);
  if (o.requester) {
    const why = identityProblem(o.requester);
    if (why) throw configError(`requester: ${why}`);
  }
  const durations: Array<[keyof SessionOptions, number]> = [
    ["requestTimeoutMs", 10_000],
    ["renewLoopMs", 600_000],
    ["minRetryMs", 5_000],
    ["backoffInitialMs", 3_000],
    ["backoffMaxMs", 60_000],
  ];
  const d: Record<string, number> = {};
  for (const [k, def] of durations) {
    const v = (o[k] as number | undefined) || def;
    if (!Number.isFinite(v) || v < 0) throw configError(`${k} ${v} is not a duration in ms`);
    d[k] = v;
  }
  const mult = o.backoffMultiplier || 2;
  if (!(mult >= 1)) throw configError(`backoffMultiplier ${mult} is below 1`);
  let jitter = o.backoffJitter || 0.2;
  if (jitter < 0) jitter = 0;
  if (!(jitter < 1)) throw configError(`backoffJitter ${jitter} must be below 1`);
  let host = o.host ?? "";
  if (host === "") {
    host = hostname().trim();
  } else if (host === "-") {
    host = "";
  }
  const client = host || (o.labels && Object.keys(o.labels).length > 0) ? { ...(host ? { host } : {}), ...(o.labels ? { labels: { ...o.labels } } : {}) } : undefined;
  const log = o.logger ?? stderrLogger;
  const fetchFn = o.fetch ?? (globalThis.fetch as unknown as Fetch | undefined);
  if (!fetchFn) throw configError("no global fetch (Node.js 20 or later has one); pass options.fetch");
  return {
    urls,
    apiKey: o.apiKey,
    count,
    requester: o.requester,
    client,
    requestTimeoutMs: d.requestTimeoutMs!,
    renewLoopMs: d.renewLoopMs!,
    minRetryMs: d.minRetryMs!,
    backoffInitialMs: d.backoffInitialMs!,
    backoffMaxMs: d.backoffMaxMs!,
    backoffMultiplier: mult,
    backoffJitter: jitter,
    maxBackwardStepMs: o.maxBackwardStepMs ?? defaultMaxBackwardStepMs,
    onFatal:
      o.onFatal ??
      ((err) => {
        log.error("idkeeper client: the lease is lost; exiting the process", { err: err.message });
        process.exit(1);
      }),
    onEvent: o.onEvent ?? (() => {}),
    log,
    clock: o.clock ?? systemClock,
    fetch: fetchFn,
    random: o.random ?? Math.random,
  };
}

/** The default logger: one line on stderr per entry of level info and above. */
export const stderrLogger: Logger = {
  info: (m, f) => line("INFO", m, f),
  warn: (m, f) => line("WARN", m, f),
  error: (m, f) => line("ERROR", m, f),
};

function line(level: string, msg: string, fields?: Record<string, unknown>): void {
  let s = `${new Date().toISOString()} ${level} ${msg}`;
  for (const [k, v] of Object.entries(fields ?? {})) s += ` ${k}=${typeof v === "string" ? JSON.stringify(v) : JSON.stringify(v, bigintSafe)}`;
  process.stderr.write(s + "\n");
}

function bigintSafe(_k: string, v: unknown): unknown {
  return typeof v === "bigint" ? v.toString() : v;
}
