import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { hostname } from "node:os";

/** The identity of this process, without a session's instance. */
export interface ProcessIdentity {
  machineId: string;
  pid: number;
  /** Unix milliseconds. */
  startedAtMs: number;
}

const moduleInit = Date.now();
const userHZ = 100; // the unit of /proc/self/stat's start time on every Linux architecture
const maxMachineIdLen = 256;
let cached: ProcessIdentity | undefined;

/**
 * This process's identity, the default requester of a Session before it adds its
 * instance: the machine ID (/etc/machine-id, else /var/lib/dbus/machine-id, else the
 * host name), the PID, and the process start time (from /proc on Linux, to 10 ms;
 * elsewhere the time this module was loaded), to the millisecond. Read once.
 *
 * These three alone do not tell sessions apart (DESIGN §3): every Session adds a
 * random instance of its own ({@link newInstance}).
 */
export function processIdentity(): ProcessIdentity {
  cached ??= { machineId: machineId(), pid: process.pid, startedAtMs: processStart() };
  return cached;
}

/** A fresh random instance: 128 bits as 22 base64url characters. */
export function newInstance(): string {
  return randomBytes(16).toString("base64url");
}

/** Returns why a requester's machine ID and PID are unusable, or "". */
export function identityProblem(r: ProcessIdentity): string {
  if (typeof r.machineId !== "string" || r.machineId === "") return "requester.machineId is required";
  if (Buffer.byteLength(r.machineId) > maxMachineIdLen) return `requester.machineId is longer than ${maxMachineIdLen} bytes`;
  // Controls, format characters (bidi overrides, zero-width) and line separators, as the server refuses them.
  if (/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u.test(r.machineId)) return "requester.machineId must be printable text";
  if (!Number.isSafeInteger(r.pid) || r.pid < 1) return "requester.pid must be an integer of at least 1";
  if (!Number.isFinite(r.startedAtMs)) return "requester.startedAtMs is required";
  return "";
}

function machineId(): string {
  for (const p of ["/etc/machine-id", "/var/lib/dbus/machine-id"]) {
    try {
      const id = readFileSync(p, "utf8").trim();
      if (id !== "" && Buffer.byteLength(id) <= maxMachineIdLen) return id;
    } catch {
      // try the next
    }
  }
  const h = hostname().trim();
  if (h === "") throw new Error("idkeeper client: no machine ID in /etc/machine-id or /var/lib/dbus/machine-id and an empty host name");
  return h;
}

function processStart(): number {
  try {
    const stat = readFileSync("/proc/self/stat", "utf8");
    const sys = readFileSync("/proc/stat", "utf8");
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    const fields = stat.slice(stat.lastIndexOf(")") + 1).trim().split(/\s+/);
    const ticks = Number(fields[22 - 3]);
    const btime = /^btime (\d+)$/m.exec(sys);
    if (Number.isSafeInteger(ticks) && btime) return Number(btime[1]) * 1000 + Math.floor((ticks * 1000) / userHZ);
  } catch {
    // not Linux
  }
  return moduleInit;
}
