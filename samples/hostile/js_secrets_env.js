// name: js-secrets-env
// tries: find the API key planted in the launcher's environment: process.env, and every /proc/<pid>/environ and cmdline it can open
// must: show it nothing of the host's environment
// expect: *=ok
const fs = require('fs');
const found = [];
if (process.env.ANTHROPIC_API_KEY) found.push('process.env: ' + process.env.ANTHROPIC_API_KEY);
let pids = ['self', String(process.ppid), '1'];
try {
  pids = pids.concat(fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p)));
} catch (e) {}
for (const pid of new Set(pids)) {
  for (const f of ['environ', 'cmdline']) {
    try {
      for (const v of fs.readFileSync(`/proc/${pid}/${f}`, 'latin1').split('\0')) {
        if (v.startsWith('ANTHROPIC_API_KEY=')) found.push(`/proc/${pid}/${f}: ${v}`);
      }
    } catch (e) {}
  }
}
console.log('found:', found.length ? found : 'nothing');
