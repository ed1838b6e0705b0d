// Imported first by main.tsx. The protocol's frame codec (@warren/protocol's frame.ts) is
// written against Node's Buffer; in the browser the `buffer` package provides it. Its zod schemas
// run without compiling code at run time, which the page's CSP (no eval) forbids anyway.
import { Buffer } from 'buffer';
import { z } from 'zod';

(globalThis as { Buffer?: typeof Buffer }).Buffer ??= Buffer;
z.config({ jitless: true });
