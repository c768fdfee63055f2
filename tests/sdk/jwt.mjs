// Makes the JWKS and tokens the JWT tests present (SPEC §21), with npm's jose, a real JOSE
// library: one key pair per accepted algorithm, tokens good and bad of every kind.
//   node tests/sdk/jwt.mjs <path to node_modules/jose> <output dir> <issuer> <audience>
// Writes jwks.json (every public key), rotated.json (a new key only) and tokens.json; with
// BENCH_TENANTS=N also bench-tokens.txt, one token a line for tenants t1..tN (BENCH_JWT_ALG,
// default ES256), for bench/run-gateway-bench.sh's jwt rows.
import { writeFileSync } from 'node:fs';
import { createPublicKey } from 'node:crypto';

const [josePath, out, issuer, audience] = process.argv.slice(2);
const jose = await import(`${josePath}/dist/webapi/index.js`).catch(() => import(josePath));

const algorithms = ['RS256', 'RS384', 'RS512', 'PS256', 'ES256', 'ES384', 'EdDSA'];
const now = Math.floor(Date.now() / 1000);
const base = { org: 'acme', plan: 'pro', sub: 'user-1', iss: issuer, aud: audience };

async function pair(alg, kid) {
    const { publicKey, privateKey } = await jose.generateKeyPair(alg, { extractable: true, crv: alg === 'EdDSA' ? 'Ed25519' : undefined });
    const jwk = { ...(await jose.exportJWK(publicKey)), kid, alg, use: 'sig' };
    return { jwk, publicKey, privateKey };
}

async function sign(key, alg, kid, claims, header = {}) {
    const jwt = new jose.SignJWT(claims).setProtectedHeader({ alg, kid, typ: 'JWT', ...header });
    return jwt.sign(key);
}

const keys = {};
for (const alg of algorithms) keys[alg] = await pair(alg, `k-${alg}`);
const rotated = await pair('ES256', 'k-rotated');
const stranger = await pair('RS256', 'k-RS256');  // same kid as ours, another key: a forgery

const tokens = {};
for (const alg of algorithms)
    tokens[`valid_${alg}`] = await sign(keys[alg].privateKey, alg, `k-${alg}`, { ...base, exp: now + 3600 });
const rs = keys.RS256.privateKey;
tokens.expired = await sign(rs, 'RS256', 'k-RS256', { ...base, exp: now - 3600 });
tokens.within_leeway = await sign(rs, 'RS256', 'k-RS256', { ...base, exp: now - 5 });
tokens.early = await sign(rs, 'RS256', 'k-RS256', { ...base, nbf: now + 3600, exp: now + 7200 });
tokens.wrong_issuer = await sign(rs, 'RS256', 'k-RS256', { ...base, iss: 'https://evil.example/', exp: now + 3600 });
tokens.wrong_audience = await sign(rs, 'RS256', 'k-RS256', { ...base, aud: 'someone-else', exp: now + 3600 });
tokens.audience_list = await sign(rs, 'RS256', 'k-RS256', { ...base, aud: ['other', audience], exp: now + 3600 });
tokens.no_exp = await sign(rs, 'RS256', 'k-RS256', { ...base });
tokens.bad_signature = await sign(stranger.privateKey, 'RS256', 'k-RS256', { ...base, exp: now + 3600 });
tokens.unknown_kid = await sign(rotated.privateKey, 'ES256', 'k-rotated', { ...base, exp: now + 3600 });
// Not in the config, and a tier claim naming no tier; then none at all; then a tier the config has.
tokens.unknown_tenant = await sign(rs, 'RS256', 'k-RS256', { ...base, org: 'ghost', plan: 'platinum', exp: now + 3600 });
tokens.no_tier = await sign(rs, 'RS256', 'k-RS256', { org: 'ghost', sub: 'user-1', iss: issuer, aud: audience, exp: now + 3600 });
tokens.claimed_tier = await sign(rs, 'RS256', 'k-RS256', { ...base, org: 'initech', exp: now + 3600 });
tokens.no_subject = await sign(rs, 'RS256', 'k-RS256', { org: 'acme', iss: issuer, aud: audience, exp: now + 3600 });
// The classic confusion: HS256 keyed with the RSA public key, as a verifier that lets the
// token choose its algorithm would check it.
const pem = createPublicKey({ key: keys.RS256.jwk, format: 'jwk' }).export({ type: 'spki', format: 'pem' });
tokens.hs256_public_key = await sign(new TextEncoder().encode(pem), 'HS256', 'k-RS256', { ...base, exp: now + 3600 });
// alg none: no signature at all (jose will not make one; these are its bytes by hand).
const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
tokens.alg_none = `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ ...base, exp: now + 3600 })}.`;
// A valid signature over a payload that names the tenant twice: parsers disagree on which wins.
const twice = `{"org":"ghost","org":"acme","iss":${JSON.stringify(issuer)},"aud":${JSON.stringify(audience)},"exp":${now + 3600}}`;
const protectedHeader = b64({ alg: 'ES256', kid: 'k-ES256' });
const signingInput = `${protectedHeader}.${Buffer.from(twice).toString('base64url')}`;
const signature = new Uint8Array(await crypto.subtle.sign({ name: 'ECDSA', hash: 'SHA-256' }, keys.ES256.privateKey,
    new TextEncoder().encode(signingInput)));
tokens.duplicate_claim = `${signingInput}.${Buffer.from(signature).toString('base64url')}`;
tokens.rotated = tokens.unknown_kid;

writeFileSync(`${out}/jwks.json`, JSON.stringify({ keys: algorithms.map((a) => keys[a].jwk) }));
writeFileSync(`${out}/rotated.json`, JSON.stringify({ keys: [rotated.jwk] }));
writeFileSync(`${out}/tokens.json`, JSON.stringify(tokens));
const benchTenants = Number(process.env.BENCH_TENANTS || 0);
if (benchTenants > 0) {
    const alg = process.env.BENCH_JWT_ALG || 'ES256';
    const lines = [];
    for (let i = 1; i <= benchTenants; ++i)
        lines.push(await sign(keys[alg].privateKey, alg, `k-${alg}`, { ...base, org: `t${i}`, sub: `user-${i}`, exp: now + 86400 }));
    writeFileSync(`${out}/bench-tokens.txt`, lines.join('\n') + '\n');
}
console.log(JSON.stringify({ ok: true, algorithms }));
