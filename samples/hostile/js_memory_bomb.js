// name: js-memory-bomb
// tries: allocate and touch memory outside V8's heap without end: Buffer.alloc and typed arrays (V8's own heap limit does not cover them)
// must: stop it at the memory limit (OOM kill or refused allocation); the host keeps its memory
// expect: *=violation:memory
const chunks = [];
for (let i = 0; ; i++) {
  // Filled, so every page is touched (resident), not just reserved.
  chunks.push(i % 2 ? Buffer.alloc(16 << 20, 1) : new Float64Array(2 << 20).fill(1.5));
}
