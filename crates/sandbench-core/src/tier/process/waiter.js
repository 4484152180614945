// The process tier's pre-started Node (sandbench's own code, not the
// program's): the JavaScript twin of waiter.py. The sandbox starts it as
// `node main.js` with every limit of the run's process already applied
// (namespaces, root, Landlock, seccomp, its own uid), so Node's start-up is
// paid before the program arrives. It writes one byte on fd 4 (ready), then
// waits on fd 3 for init's word. Only "run" is possible here: Node cannot
// exec another interpreter, so the tier hands this waiter only a run of
// exactly `node main.js` with the environment it was started with (anything
// else gets a sandbox of its own). Both descriptors are closed before any
// byte of the program runs, and the program is loaded as the main module
// (require.main, module.id '.') from the file init wrote over this one, as
// `node main.js` would have loaded it.
'use strict';
(function sandbenchWaiter(fs, Module, self) {
  fs.writeSync(4, 'r');
  fs.closeSync(4);
  const chunks = [];
  const buf = Buffer.alloc(64);
  for (;;) {
    const n = fs.readSync(3, buf, 0, buf.length, null);
    if (n === 0) break;
    chunks.push(Buffer.from(buf.subarray(0, n)));
    if (chunks.length > 64) break;
  }
  fs.closeSync(3);
  if (Buffer.concat(chunks).toString('latin1') !== 'run') {
    process.exit(121);
  }
  // This file's module leaves the cache: the program gets a fresh one.
  delete Module._cache[self];
  Module.runMain(self);
})(require('fs'), require('module'), __filename);
