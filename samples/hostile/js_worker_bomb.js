// name: js-worker-bomb
// tries: start worker_threads without end (each a kernel task with its own V8 isolate and heap)
// must: refuse new threads at the pids (or memory) limit
// expect: *=violation:pids|memory|wall_timeout gvisor=violation:pids|memory|wall_timeout|cpu_time
// (under gVisor each isolate's start costs CPU: the CPU limit may come first)
const { Worker } = require('worker_threads');
let n = 0;
function more() {
  for (let i = 0; i < 8; i++) {
    try {
      new Worker('setInterval(() => {}, 1 << 30)', { eval: true }).on('error', () => {});
      n++;
    } catch (e) {
      // refused: keep trying, as a hostile program would
    }
  }
  setImmediate(more);
}
more();
