/**
 * Wire times and the ID layout: what the server prescribes, checked as the Go
 * client checks it (snowflake.Layout.Validate), and composing and decoding IDs.
 */

const rfc3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/**
 * Parses an RFC 3339 time with any offset and any fraction of a second into Unix
 * milliseconds, keeping the fraction below the millisecond (rounding is the
 * reader's decision: a window's start rounds up, its end down). Throws on anything
 * else, including impossible dates.
 */
export function parseTime(s: string): number {
  const m = rfc3339.exec(s);
  if (!m) throw new Error(`${JSON.stringify(s)} is not an RFC 3339 time`);
  const [y, mo, d, h, mi, se] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const ms = Date.UTC(y, mo - 1, d, h, mi, se);
  const check = new Date(ms);
  if (check.getUTCFullYear() !== y || check.getUTCMonth() !== mo - 1 || check.getUTCDate() !== d || h > 23 || mi > 59 || se > 59) {
    throw new Error(`${JSON.stringify(s)} is not a valid date and time`);
  }
  let offset = 0;
  const z = m[8]!;
  if (z !== "Z" && z !== "z") {
    const oh = Number(z.slice(1, 3));
    const om = Number(z.slice(4, 6));
    if (oh > 23 || om > 59) throw new Error(`${JSON.stringify(s)} has an invalid offset`);
    offset = (z[0] === "-" ? -1 : 1) * (oh * 60 + om) * 60_000;
  }
  const frac = m[7] ? Number("0" + m[7]) * 1000 : 0;
  return ms - offset + frac;
}

/** Renders Unix milliseconds (rounded down) as the API writes times: RFC 3339 UTC with milliseconds. */
export function formatTime(ms: number): string {
  return new Date(Math.floor(ms)).toISOString();
}

/** The layout of a 64-bit ID, as the server prescribes it (its Alloc answer). */
export interface Layout {
  /** Millisecond 0 of the timestamp field, in Unix milliseconds. */
  readonly epochMs: number;
  readonly timestampBits: number;
  readonly nodeBits: number;
  readonly sequenceBits: number;
}

/** The default layout: 41/12/10 bits on the epoch 2026-01-01T00:00:00Z. */
export const defaultLayout: Layout = Object.freeze({
  epochMs: Date.UTC(2026, 0, 1),
  timestampBits: 41,
  nodeBits: 12,
  sequenceBits: 10,
});

const int64Max = (1n << 63n) - 1n;

/**
 * Returns why the layout is invalid, or "" when it is valid: a width that is not a
 * positive integer, widths that do not add up to 63, a node or sequence field wider
 * than 32 bits, an epoch that is not a whole millisecond, or a layout whose end does
 * not fit int64 Unix milliseconds.
 */
export function layoutProblem(l: Layout): string {
  const widths = [l.timestampBits, l.nodeBits, l.sequenceBits];
  if (!widths.every((w) => Number.isInteger(w) && w > 0)) {
    return `every width must be a positive integer (timestamp ${l.timestampBits}, node ${l.nodeBits}, sequence ${l.sequenceBits})`;
  }
  const sum = l.timestampBits + l.nodeBits + l.sequenceBits;
  if (sum !== 63) return `widths add up to ${sum}, want 63`;
  if (l.nodeBits > 32 || l.sequenceBits > 32) {
    return `node and sequence widths must be at most 32 bits (node ${l.nodeBits}, sequence ${l.sequenceBits})`;
  }
  if (!Number.isSafeInteger(l.epochMs)) return `epoch ${l.epochMs} is not a whole millisecond`;
  if (BigInt(l.epochMs) > int64Max - (1n << BigInt(l.timestampBits))) {
    return `the layout's end (epoch + 2^${l.timestampBits} ms) is not representable in Unix milliseconds`;
  }
  return "";
}

/** The largest node ID of the layout: 2^nodeBits − 1. */
export function maxNode(l: Layout): number {
  return 2 ** l.nodeBits - 1;
}

/** One node ID's ceiling: 2^sequenceBits IDs per millisecond, × 1000. */
export function idsPerSecond(l: Layout): number {
  return 2 ** l.sequenceBits * 1000;
}

/** An ID split into its fields. */
export interface DecodedId {
  /** The ID's millisecond in Unix milliseconds. */
  timeMs: number;
  /** Milliseconds since the layout's epoch. */
  timestamp: number;
  nodeId: number;
  sequence: number;
}

/** Splits an ID (a bigint, or its decimal string) into its fields. Throws on a negative or too wide ID. */
export function decodeId(id: bigint | string, layout: Layout = defaultLayout): DecodedId {
  const v = typeof id === "string" ? BigInt(id) : id;
  if (v < 0n || v > int64Max) throw new RangeError(`ID ${v} is outside 0..2^63-1`);
  const seqBits = BigInt(layout.sequenceBits);
  const nodeBits = BigInt(layout.nodeBits);
  const ts = Number(v >> (seqBits + nodeBits));
  return {
    timeMs: layout.epochMs + ts,
    timestamp: ts,
    nodeId: Number((v >> seqBits) & ((1n << nodeBits) - 1n)),
    sequence: Number(v & ((1n << seqBits) - 1n)),
  };
}

/** The JS-safe form of an ID: its decimal string (an ID above 2^53 is not exact as a number). */
export function idString(id: bigint): string {
  return id.toString();
}
