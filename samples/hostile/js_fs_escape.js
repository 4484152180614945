// name: js-fs-escape
// tries: read host secrets through fs (the user's home, /etc/shadow, ssh keys, through /proc/1/root and a planted symlink) and write outside its scratch space
// must: show it nothing of the host's files and allow writes only to its scratch directory and private /tmp
// expect: *=ok
const fs = require('fs');
const path = require('path');
const home = process.env.CANARY_HOME || '/root';
const reads = (process.env.CANARY_SECRET_FILES || '').split(':').filter(Boolean);
reads.push(path.join(home, 'canary-secret.txt'), '/etc/shadow', '/root/.ssh/id_rsa', '/root/.bash_history');
for (const p of [...reads]) reads.push('/proc/1/root' + p);
try {
  fs.symlinkSync('/etc/shadow', 'shadow-link');
  reads.push('shadow-link');
} catch (e) {
  console.log(`no symlink: ${e.code}`);
}
for (const p of new Set(reads)) {
  try {
    console.log(`READ ${p}: ${JSON.stringify(fs.readFileSync(p, 'utf8').slice(0, 200))}`);
  } catch (e) {
    console.log(`cannot read ${p}: ${e.code}`);
  }
}
const writes = [
  process.env.CANARY_OUTSIDE || '/var/tmp/sandbench-canary-outside',
  path.join(home, 'written-by-sandbox'),
  '/etc/sandbench-canary',
  '/usr/sandbench-canary',
];
for (const p of writes) {
  try {
    fs.writeFileSync(p, `escaped ${process.env.CANARY_MARK || ''}\n`);
    console.log(`WROTE ${p}`);
  } catch (e) {
    console.log(`cannot write ${p}: ${e.code}`);
  }
}
