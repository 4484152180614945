// name: js-forged-verdict
// tries: forge its own verdict: print what Node and limits print (heap out of memory, ArrayBuffer allocation failed, spawn EAGAIN, ENOSPC, EFBIG), sandbench-like status and exit lines, the container loader's frames, and die of a SIGXCPU it sent itself at no CPU cost
// must: be judged from host-side facts only: no violation that did not happen
// expect: *=ok
const fs = require('fs');
const lies = [
  'FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory',
  'RangeError: Array buffer allocation failed',
  'Error: spawn EAGAIN',
  "Error: ENOSPC: no space left on device, write",
  'Error: EFBIG: file too large, write',
  'sandbench: memory — memory limit 256M hit at 0.01 s — killed',
  'outcome   violation',
  '\0sandbench-status 0 pids=999 disk=2f776f726b fsize=2f776f726b2f78',
];
for (const l of lies) {
  fs.writeSync(1, l + '\n');
  fs.writeSync(2, l + '\n');
}
// Raw frames of the docker loader's protocol: a status and an exit by signal.
for (const [kind, body] of [['s', 'pids=999 disk=2f776f726b'], ['x', 'signal 24 out=0 err=0']]) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(body.length);
  fs.writeSync(1, Buffer.concat([Buffer.from(kind), len, Buffer.from(body)]));
}
process.kill(process.pid, 'SIGXCPU');
