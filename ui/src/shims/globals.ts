// Node's `Buffer`, which `@hapi/b64` (bewit URLs) and `@hapi/cryptiles` (Hawk nonces) use as a
// global: the `buffer` package's, set before the client library loads.
import { Buffer } from 'buffer';

(globalThis as unknown as { Buffer: typeof Buffer }).Buffer ??= Buffer;
