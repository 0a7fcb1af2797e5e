/**
 * IdKeeper's embeddable client for Node.js: a Session holds the leases of one or
 * more node IDs from an IdKeeper registry and mints 64-bit Snowflake IDs locally,
 * with no network hop per ID, under the rules of DESIGN §4 (docs/clients.md).
 *
 * ```ts
 * import { Session } from "@idkeeper/client";
 * const s = await Session.start({ servers: ["http://idkeeper:8080"], apiKey: process.env.IDKEEPER_API_KEY! });
 * const id: bigint = s.nextId();      // s.nextIdString() for the JS-safe decimal form
 * await s.close();                    // Remove with mintedUpTo
 * ```
 * @packageDocumentation
 */
export { Session, type CloseResult } from "./session.js";
export type { SessionOptions, SessionEvent, Logger } from "./config.js";
export { stderrLogger } from "./config.js";
export { systemClock, type Clock, type Timer } from "./clock.js";
export { IdKeeperError, LeaseLostError, InvalidGrantError, ServerError, isCode, type ClientCode, type LossReason, type GrantFault } from "./errors.js";
export { MalformedError, TransportError, type Fetch, type Lease, type Requester } from "./wire.js";
export { NodeGenerator, defaultMaxBackwardStepMs, clockStallSlackMs, type ClockStep } from "./generator.js";
export { defaultLayout, decodeId, idString, idsPerSecond, layoutProblem, maxNode, parseTime, formatTime, type Layout, type DecodedId } from "./layout.js";
export { processIdentity, newInstance, type ProcessIdentity } from "./requester.js";
