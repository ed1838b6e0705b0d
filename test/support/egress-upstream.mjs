// An upstream for the egress gateway tests, run inside a network namespace the test made:
// plain HTTP on :80 and HTTPS on :443 (certificate from argv), both echoing what they received
// as JSON and logging each request as one JSON line on stdout. With a fourth argument, a folder,
// it serves that folder's files as they are under /static/ (a package repository, a Python index).
import { readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import http from 'node:http';
import https from 'node:https';

const [address, certFile, keyFile, staticDir] = process.argv.slice(2);

/** The file below staticDir a /static/ URL names (a folder's index.html), or undefined (outside it, or none). */
function staticFile(url) {
  if (staticDir === undefined || !url.startsWith('/static/')) return undefined;
  const file = path.resolve(staticDir, `.${decodeURIComponent(url.slice('/static'.length).split('?')[0])}`);
  if (file !== path.resolve(staticDir) && !file.startsWith(`${path.resolve(staticDir)}/`)) return undefined;
  try {
    const info = statSync(file);
    if (info.isDirectory()) return statSync(path.join(file, 'index.html')).isFile() ? path.join(file, 'index.html') : undefined;
    return info.isFile() ? file : undefined;
  } catch {
    return undefined;
  }
}
function handle(scheme) {
  return (req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const seen = { scheme, method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString(), remote: req.socket.remoteAddress };
      process.stdout.write(`${JSON.stringify(seen)}\n`);
      if (req.url.startsWith('/static/')) {
        const file = staticFile(req.url);
        if (file === undefined) {
          res.writeHead(404).end();
          return;
        }
        const body = readFileSync(file);
        res.writeHead(200, { 'content-type': file.endsWith('.html') ? 'text/html' : 'application/octet-stream', 'content-length': body.length });
        res.end(req.method === 'HEAD' ? undefined : body);
        return;
      }
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
