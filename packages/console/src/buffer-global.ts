// The protocol's frame codec (packages/protocol/src/frame.ts) is written against Node's Buffer; in
// the browser the `buffer` package provides it. Imported first by main.tsx.
import { Buffer } from 'buffer';

(globalThis as { Buffer?: typeof Buffer }).Buffer ??= Buffer;
