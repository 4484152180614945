// name: js-fork-bomb
// tries: child_process without end: every child is another node running this same file, which spawns more
// must: refuse new processes at the pids (or memory) limit; the host stays responsive
// expect: *=violation:pids|memory gvisor=violation:pids|memory|cpu_time
// (under gVisor every node costs most of a second of CPU to start: the
// run's CPU limit may stop the bomb before its pids or memory limit does)
const { spawn } = require('child_process');
let failed = 0;
function bomb() {
  for (let i = 0; i < 32; i++) {
    try {
      spawn(process.execPath, [__filename], { stdio: 'ignore', detached: true }).on('error', () => failed++);
    } catch (e) {
      failed++;
    }
  }
  setImmediate(bomb);
}
bomb();
