// A JWKS endpoint for the JWT tests (an identity provider's): serves <file> as it is now at
// every GET /jwks, 404 for any other path, 503 while the file is missing.
//   node tests/sdk/jwks_server.mjs <port> <file>
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';

const [port, file] = process.argv.slice(2);
createServer((req, res) => {
    if (req.url !== '/jwks') return res.writeHead(404).end();
    let body;
    try { body = readFileSync(file); } catch { return res.writeHead(503).end(); }
    res.writeHead(200, { 'content-type': 'application/json' }).end(body);
}).listen(Number(port), '127.0.0.1', () => console.log('listening'));
