import { IdKeeperError, ServerError } from "./errors.js";
import { formatTime, parseTime, type Layout } from "./layout.js";

/** The fetch the client sends its requests with: the global fetch, or a test's fake. */
export type Fetch = (url: string, init: { method: string; headers: Record<string, string>; body: string; signal: AbortSignal; redirect: "manual" }) => Promise<Response>;

/** The requester of a session (DESIGN §3): machine ID, PID, process start time and the session's instance. */
export interface Requester {
  machineId: string;
  pid: number;
  /** Unix milliseconds. */
  startedAtMs: number;
  instance: string;
}

/** One node ID the session holds. Times are the server's, in Unix milliseconds. */
export interface Lease {
  nodeId: number;
  /** The first millisecond the generator may mint with. */
  notBeforeMs: number;
  /** The last millisecond it may mint with, and the end of the lease. */
  expiresAtMs: number;
  /** Grows with every new grant (1 … 2^53−1): hand it to stores that must fence off a previous holder. */
  fencingToken: number;
  /** The registry's signed statement of the lease, sent back with every Renew; "" when none. */
  receipt: string;
}

/** A decoded 200 answer of Alloc or Renew. */
export interface Grant {
  layout: Layout | null; // Alloc only
  leases: Lease[];
  serverNowMs: number;
}

const maxLoggedBody = 4096;

/** A 200 answer whose body does not follow the HTTP contract: retried like a transport error. */
export class MalformedError extends IdKeeperError {
  constructor(op: string, message: string) {
    super("MALFORMED", `idkeeper client: ${op}: malformed answer: ${message}`);
  }
}

/** No replica answered: refused, reset, timed out. */
export class TransportError extends IdKeeperError {
  constructor(op: string, message: string, cause?: unknown) {
    super("TRANSPORT", `idkeeper client: ${op}: ${message}`, { cause });
  }
}

/**
 * The registry's API over one or more replicas of one deployment. A request goes
 * to the replica that answered last and moves on to the next, once each per call,
 * on a transport error or a 5xx answer, never on another answer: a 4xx is the
 * registry's verdict, and every replica would give the same. Redirects are not
 * followed: the API key would go with them.
 */
export class Api {
  private cur = 0;

  constructor(
    readonly urls: readonly string[],
    private readonly apiKey: string,
    private readonly fetchFn: Fetch,
    private readonly timeoutMs: number,
    private readonly onFailover: (op: string, from: string, to: string, err: unknown) => void,
  ) {}

  async alloc(r: Requester, count: number, clientNowMs: number, client: object | undefined, signal: AbortSignal): Promise<Grant> {
    const body: Record<string, unknown> = { requester: wireRequester(r), count, clientUtcNow: formatTime(clientNowMs) };
    if (client) body.client = client;
    const ans = await this.post("alloc", "/v1/leases", body, signal);
    const l = ans.layout;
    if (!isObject(l)) throw new MalformedError("alloc", `no "layout" member`);
    let epochMs: number;
    try {
      epochMs = parseTime(String(l.epoch ?? ""));
    } catch (e) {
      throw new MalformedError("alloc", `layout.epoch: ${(e as Error).message}`);
    }
    const bits = [l.timestampBits, l.nodeBits, l.sequenceBits];
    if (!bits.every((b) => typeof b === "number")) throw new MalformedError("alloc", "layout widths are not numbers");
    const g = decodeGrant("alloc", ans);
    g.layout = { epochMs, timestampBits: l.timestampBits as number, nodeBits: l.nodeBits as number, sequenceBits: l.sequenceBits as number };
    return g;
  }

  async renew(r: Requester, clientNowMs: number, tokens: number[], receipts: string[], signal: AbortSignal): Promise<Grant> {
    const body: Record<string, unknown> = { requester: wireRequester(r), clientUtcNow: formatTime(clientNowMs), fencingTokens: tokens };
    if (receipts.length > 0) body.receipts = receipts;
    return decodeGrant("renew", await this.post("renew", "/v1/leases/renew", body, signal));
  }

  /** Releases the requester's leases; mintedUpToMs NaN leaves mintedUpTo out. Returns how many were released. */
  async remove(r: Requester, mintedUpToMs: number, signal: AbortSignal): Promise<number> {
    const body: Record<string, unknown> = { requester: wireRequester(r) };
    if (!Number.isNaN(mintedUpToMs)) body.mintedUpTo = formatTime(mintedUpToMs);
    const ans = await this.post("remove", "/v1/leases/remove", body, signal);
    if (typeof ans.removed !== "number") throw new MalformedError("remove", `no "removed" member`);
    return ans.removed;
  }

  private async post(op: string, path: string, body: unknown, signal: AbortSignal): Promise<Record<string, unknown>> {
    const payload = JSON.stringify(body);
    const n = this.urls.length;
    const start = this.cur;
    let last: unknown;
    for (let i = 0; i < n; i++) {
      const at = (start + i) % n;
      try {
        const ans = await this.postTo(this.urls[at]!, op, path, payload, signal);
        this.cur = at;
        return ans;
      } catch (err) {
        if (!failsOver(err)) {
          this.cur = at;
          throw err;
        }
        last = err;
        if (signal.aborted || i === n - 1) break;
        this.onFailover(op, this.urls[at]!, this.urls[(at + 1) % n]!, err);
      }
    }
    if (n > 1 && !signal.aborted && last instanceof IdKeeperError) {
      const msg = `all ${n} registry replicas failed; the last: ${last.message}`;
      if (last instanceof ServerError) throw last; // keeps its status and code for the caller's decisions
      throw new TransportError(op, msg, last);
    }
    throw last;
  }

  private async postTo(base: string, op: string, path: string, payload: string, signal: AbortSignal): Promise<Record<string, unknown>> {
    const ctl = new AbortController();
    const onAbort = () => ctl.abort(signal.reason);
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    const timer = setTimeout(() => ctl.abort(new Error(`timed out after ${this.timeoutMs} ms`)), this.timeoutMs);
    try {
      let resp: Response;
      let text: string;
      try {
        resp = await this.fetchFn(base + path, {
          method: "POST",
          headers: { "Content-Type": "application/json", Accept: "application/json, application/problem+json", "X-API-Key": this.apiKey },
          body: payload,
          signal: ctl.signal,
          redirect: "manual",
        });
        text = await resp.text();
      } catch (err) {
        const why = ctl.signal.aborted && ctl.signal.reason instanceof Error ? ctl.signal.reason.message : describe(err);
        throw new TransportError(op, `${base}: ${why}`, err);
      }
      if (resp.status !== 200) throw serverError(op, base, resp, text);
      let ans: unknown;
      try {
        ans = JSON.parse(text);
      } catch (err) {
        throw new MalformedError(op, (err as Error).message);
      }
      if (!isObject(ans)) throw new MalformedError(op, "the body is not a JSON object");
      return ans;
    } finally {
      clearTimeout(timer);
      signal.removeEventListener("abort", onAbort);
    }
  }
}

/** Whether a request that failed with err is tried on the next replica: a transport error or a 5xx. */
function failsOver(err: unknown): boolean {
  if (err instanceof ServerError) return err.status >= 500;
  return err instanceof TransportError;
}

function serverError(op: string, base: string, resp: Response, text: string): ServerError {
  let problemCode = "";
  let detail = "";
  let field = "";
  const details: Record<string, unknown> = {};
  if (resp.status >= 300 && resp.status < 400) {
    detail = `redirected to ${resp.headers.get("Location") ?? "?"}; redirects are not followed (the API key would go with them): name the registry's own address`;
  } else if ((resp.headers.get("Content-Type") ?? "").includes("json")) {
    try {
      const p: unknown = JSON.parse(text);
      if (isObject(p)) {
        problemCode = typeof p.code === "string" ? p.code : "";
        detail = typeof p.detail === "string" && p.detail ? p.detail : typeof p.title === "string" ? p.title : "";
        field = typeof p.field === "string" ? p.field : "";
        for (const [k, v] of Object.entries(p)) {
          if (!["type", "title", "status", "detail", "code", "field", "instance"].includes(k)) details[k] = v;
        }
      }
    } catch {
      // not JSON after all: the status alone tells
    }
  }
  return new ServerError({ op, server: base, status: resp.status, problemCode, detail, field, details, body: text.slice(0, maxLoggedBody) });
}

function decodeGrant(op: string, ans: Record<string, unknown>): Grant {
  if (!Array.isArray(ans.leases)) throw new MalformedError(op, `no "leases" member`);
  const serverNowMs = timeMember(op, ans.serverUtcNow, "serverUtcNow");
  const leases = ans.leases.map((wl: unknown, i: number): Lease => {
    if (!isObject(wl)) throw new MalformedError(op, `leases[${i}] is not an object`);
    const { nodeId, fencingToken } = wl;
    if (typeof nodeId !== "number" || !Number.isInteger(nodeId) || typeof fencingToken !== "number" || !Number.isSafeInteger(fencingToken)) {
      throw new MalformedError(op, `leases[${i}] lacks nodeId or fencingToken (integers, the token at most 2^53-1)`);
    }
    return {
      nodeId,
      fencingToken,
      notBeforeMs: timeMember(op, wl.notBefore, `leases[${i}].notBefore`),
      expiresAtMs: timeMember(op, wl.expiresAt, `leases[${i}].expiresAt`),
      receipt: typeof wl.receipt === "string" ? wl.receipt : "",
    };
  });
  return { layout: null, leases, serverNowMs };
}

function timeMember(op: string, v: unknown, field: string): number {
  if (typeof v !== "string" || v === "") throw new MalformedError(op, `${field} is missing`);
  try {
    return parseTime(v);
  } catch (err) {
    throw new MalformedError(op, `${field}: ${(err as Error).message}`);
  }
}

function wireRequester(r: Requester): Record<string, unknown> {
  return { machineId: r.machineId, pid: r.pid, startedAt: formatTime(r.startedAtMs), instance: r.instance };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    const c = (err as { cause?: unknown }).cause;
    return c instanceof Error ? `${err.message}: ${c.message}` : err.message;
  }
  return String(err);
}
