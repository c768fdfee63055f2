// Reference for the tokenizer.json test: Hugging Face `tokenizers` itself, through npm's
// @anush008/tokenizers (its native package for linux-x64 is the Rust library).
//   node reference.js <node_modules/@anush008/tokenizers> <tokenizer.json> <dir of .txt files>
// prints {"<file>": len(encode(text, add_special_tokens=True))} as JSON.
const fs = require('fs');
const path = require('path');
const [pkg, tokenizerFile, dir] = process.argv.slice(2);
const { Tokenizer } = require(pkg);
const tokenizer = Tokenizer.fromFile(tokenizerFile);
(async () => {
  const counts = {};
  for (const f of fs.readdirSync(dir).filter(n => n.endsWith('.txt')).sort()) {
    const text = fs.readFileSync(path.join(dir, f), 'utf8');
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: true });
    counts[f] = encoding.getLength();
  }
  console.log(JSON.stringify(counts));
})().catch(e => { console.error(e); process.exit(1); });
