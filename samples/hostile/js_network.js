// name: js-network
// tries: reach the host through every Node network API: net (TCP over IPv4 and IPv6, an abstract unix socket), http, dgram (UDP) and dns
// must: give it no network path to the host at all
// expect: *=ok
// escaped-if: "CONNECTED"
const net = require('net');
const http = require('http');
const dgram = require('dgram');
const dns = require('dns');
const port = Number(process.env.CANARY_PORT || 8765);
const port6 = Number(process.env.CANARY_PORT6 || port);
const unix = '\0' + (process.env.CANARY_UNIX || 'sandbench-canary');
const tries = [];
const attempt = (what, opts) =>
  new Promise((done) => {
    const s = net.connect(opts, () => {
      s.write('escaped\n');
      console.log(`CONNECTED ${what}`);
      s.end();
      done();
    });
    s.setTimeout(1500, () => {
      console.log(`no connection ${what}: timeout`);
      s.destroy();
      done();
    });
    s.on('error', (e) => {
      console.log(`no connection ${what}: ${e.code}`);
      done();
    });
  });
tries.push(attempt('tcp 127.0.0.1', { host: '127.0.0.1', port }));
tries.push(attempt('tcp ::1', { host: '::1', port: port6 }));
tries.push(attempt('unix abstract', { path: unix }));
tries.push(
  new Promise((done) => {
    const r = http.get({ host: '127.0.0.1', port, path: '/', timeout: 1500 }, (res) => {
      console.log(`CONNECTED http ${res.statusCode}`);
      done();
    });
    r.on('timeout', () => r.destroy(new Error('timeout')));
    r.on('error', (e) => {
      console.log(`no http: ${e.code || e.message}`);
      done();
    });
  }),
);
tries.push(
  new Promise((done) => {
    const u = dgram.createSocket('udp4');
    u.on('error', (e) => {
      console.log(`no udp: ${e.code}`);
      u.close();
      done();
    });
    u.send(Buffer.from('escaped\n'), port, '127.0.0.1', (e) => {
      console.log(e ? `no udp: ${e.code}` : 'udp datagram handed to the kernel (nothing listens for it)');
      u.close();
      done();
    });
  }),
);
for (const name of ['localhost', 'example.com']) {
  tries.push(
    new Promise((done) => {
      dns.resolve4(name, (e, a) => {
        console.log(e ? `no dns ${name}: ${e.code}` : `dns ${name}: ${a}`);
        done();
      });
    }),
  );
}
Promise.all(tries).then(() => process.exit(0));
setTimeout(() => process.exit(0), 4000).unref();
