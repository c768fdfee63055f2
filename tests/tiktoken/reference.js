// Reference for the BPE test, from the npm `tiktoken` package (its own WASM encoder):
//   node reference.js <node_modules/tiktoken> <corpus dir> <out .tiktoken file>
// writes the package's cl100k ranks as a standard .tiktoken file and prints
// {"<corpus file>": <token count>} as JSON.
const fs = require('fs');
const path = require('path');
const [pkg, corpus, out] = process.argv.slice(2);
const { get_encoding } = require(pkg);
const data = JSON.parse(fs.readFileSync(path.join(pkg, 'encoders', 'cl100k_base.json'), 'utf8'));
// The package stores ranks compactly: lines of "<marker> <first rank> <base64> <base64> ...".
const lines = [];
for (const row of data.bpe_ranks.split('\n')) {
  const fields = row.split(' ');
  const first = parseInt(fields[1], 10);
  for (let i = 2; i < fields.length; ++i) lines.push(`${fields[i]} ${first + i - 2}`);
}
fs.writeFileSync(out, lines.join('\n') + '\n');
const enc = get_encoding('cl100k_base');
const counts = {};
for (const f of fs.readdirSync(corpus).filter(n => n.endsWith('.txt')).sort())
  counts[f] = enc.encode_ordinary(fs.readFileSync(path.join(corpus, f), 'utf8')).length;
enc.free();
console.log(JSON.stringify(counts));
