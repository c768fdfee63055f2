// The official Anthropic TypeScript SDK against tokengate, as a user points it there:
//   node anthropic.mjs <node_modules/@anthropic-ai/sdk> <base URL> <scenario> <api key>
// prints what the SDK saw as one JSON object. Scenarios:
//   calls        messages.create, .withResponse() headers, messages.stream (thinking, text,
//                tool use), messages.countTokens
//   rate_limited a RateLimitError without retries, then a call that the SDK retries after
//                retry-after(-ms) and that succeeds
//   quota        an exhausted quota: one RateLimitError, no retry
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [pkg, baseURL, scenario, apiKey] = process.argv.slice(2);
const { default: Anthropic } = await import(pathToFileURL(path.join(pkg, 'index.mjs')).href);
const model = 'llama3-8b';
const ask = (text) => [{ role: 'user', content: text }];

function headersOf(headers) {
  const out = {};
  for (const [name, value] of headers) {
    if (name.startsWith('anthropic-ratelimit-') || name.startsWith('retry-after') || name === 'x-should-retry')
      out[name] = value;
  }
  return out;
}

function describeError(e) {
  return {
    class: e.constructor.name,
    isRateLimitError: e instanceof Anthropic.RateLimitError,
    status: e.status,
    body: e.error,
    headers: e.headers ? headersOf(e.headers) : {},
  };
}

async function calls() {
  const client = new Anthropic({ baseURL, apiKey, maxRetries: 0 });
  const { data: message, response } = await client.messages
    .create({ model, max_tokens: 20, system: 'You are terse.', messages: ask('Hello there') },
            { headers: { 'x-mock-cached-tokens': '3' } })
    .withResponse();
  const stream = client.messages.stream({
    model,
    max_tokens: 16,
    thinking: { type: 'enabled', budget_tokens: 4 },
    tools: [{ name: 'search', description: 'Searches the web',
              input_schema: { type: 'object', properties: { query: { type: 'string' } } } }],
    messages: ask('Find the fox'),
  });
  const events = [];
  for await (const event of stream) events.push(event.type);
  const final = await stream.finalMessage();
  const counted = await client.messages.countTokens({ model, system: 'You are terse.', messages: ask('Hello there') });
  return {
    create: { type: message.type, stop_reason: message.stop_reason, text: message.content[0].text,
              usage: message.usage, headers: headersOf(response.headers) },
    stream: { events, stop_reason: final.stop_reason, blocks: final.content.map((b) => b.type),
              thinking: final.content.find((b) => b.type === 'thinking')?.thinking,
              tool_input: final.content.find((b) => b.type === 'tool_use')?.input, usage: final.usage },
    count_tokens: counted,
  };
}

async function rateLimited() {
  const once = new Anthropic({ baseURL, apiKey, maxRetries: 0 });
  await once.messages.create({ model, max_tokens: 5, messages: ask('first') });
  let refused = null;
  try {
    await once.messages.create({ model, max_tokens: 5, messages: ask('second') });
  } catch (e) {
    refused = describeError(e);
  }
  const retrying = new Anthropic({ baseURL, apiKey, maxRetries: 2 });
  const started = Date.now();
  const after = await retrying.messages.create({ model, max_tokens: 5, messages: ask('third') });
  return { refused, retried: { type: after.type, elapsed_ms: Date.now() - started } };
}

async function quota() {
  const client = new Anthropic({ baseURL, apiKey, maxRetries: 2 });
  await client.messages.create({ model, max_tokens: 5, messages: ask('first') });
  const started = Date.now();
  try {
    await client.messages.create({ model, max_tokens: 5, messages: ask('second') });
    return { refused: null };
  } catch (e) {
    return { refused: describeError(e), elapsed_ms: Date.now() - started };
  }
}

const scenarios = { calls, rate_limited: rateLimited, quota };
try {
  console.log(JSON.stringify(await scenarios[scenario]()));
} catch (e) {
  console.log(JSON.stringify({ failed: String(e?.stack ?? e), detail: e?.error ?? null }));
  process.exitCode = 1;
}
