// An upstream for the egress gateway tests, run inside a network namespace the test made:
// plain HTTP on :80 and HTTPS on :443 (certificate from argv), both echoing what they received
// as JSON and logging each request as one JSON line on stdout.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';

const [address, certFile, keyFile] = process.argv.slice(2);
function handle(scheme) {
  return (req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const seen = { scheme, method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString(), remote: req.socket.remoteAddress };
      process.stdout.write(`${JSON.stringify(seen)}\n`);
      if (req.url.startsWith('/big/')) {
        const size = Number(req.url.slice(5));
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': size });
        res.end(Buffer.alloc(size, 7));
        return;
      }
      const body = JSON.stringify(seen);
      res.writeHead(200, { 'content-type': 'application/json', 'x-echo-authorization': req.headers.authorization ?? '' });
      res.end(body);
    });
  };
}
const plain = http.createServer(handle('http'));
const secure = https.createServer({ cert: readFileSync(certFile), key: readFileSync(keyFile) }, handle('https'));
let ready = 0;
const up = () => {
  if (++ready === 2) process.stdout.write('ready\n');
};
plain.listen(80, address, up);
secure.listen(443, address, up);
