// The official `openai` npm client (pinned in package.json) against
// `colibri-coordinator serve --http-listen`: completions and chat (the
// ChatML default template), streamed and not, stop strings, seed reproducibility, a second
// chat turn's cached prompt tokens (usage.prompt_tokens_details), an auth failure and
// malformed requests. Run by CTest through run_openai_client_test.sh:
//
//   node openai_client_test.mjs COORDINATOR MODEL.gguf
//
// Exits 77 (CTest's skip code) when the client library is not installed.
import { after, before, test } from 'node:test';
import { randomBytes } from 'node:crypto';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

let OpenAI;
try {
  ({ default: OpenAI } = await import('openai'));
} catch {
  console.log('SKIP: the openai package is not installed (npm ci in tests/api_clients)');
  process.exit(77);
}

const [coordinator, modelPath] = process.argv.slice(2);
// A token as `openssl rand -hex 32` makes (the server refuses short ones).
const TOKEN = randomBytes(32).toString('hex');
const PROMPT = 'The small birds of the valley';
let server;
let baseURL;
let modelId;

// Starts serve on loopback with a token and resolves with the HTTP address.
function startServe() {
  const dir = mkdtempSync(join(tmpdir(), 'colibri-openai-'));
  const tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, TOKEN + '\n');
  server = spawn(coordinator, ['serve', '--model', modelPath, '--listen', '127.0.0.1:0',
                               '--http-listen', '127.0.0.1:0', '--threads', '1',
                               '--auth-token-file', tokenFile],
                 { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('serve did not start in 60 s')), 60000);
    server.on('exit', (code) => reject(new Error(`serve exited with ${code}`)));
    createInterface({ input: server.stdout }).on('line', (line) => {
      const m = /^http listening on (.*)$/.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
  });
}

function client(apiKey = TOKEN) {
  return new OpenAI({ apiKey, baseURL, maxRetries: 0, timeout: 120000 });
}

before(async () => {
  baseURL = `http://${await startServe()}/v1`;
  const models = await client().models.list();
  modelId = models.data[0].id;
});

after(() => {
  if (server) server.kill('SIGTERM');
});

const greedy = { prompt: PROMPT, max_tokens: 12, temperature: 0, ignore_eos: true };

test('a completion, whole and streamed, gives the same text and usage', async () => {
  const whole = await client().completions.create({ model: modelId, ...greedy });
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.choices.length, 1);
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.ok(whole.choices[0].text.length > 0);
  assert.equal(whole.usage.completion_tokens, 12);
  assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + 12);

  const stream = await client().completions.create({
    model: modelId, ...greedy, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      text += choice.text;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, 'length');
  assert.deepEqual(usage, whole.usage);
});

test('a chat completion, whole and streamed, gives the same message', async () => {
  const request = {
    model: modelId,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi there' }],
    max_completion_tokens: 10, temperature: 0, ignore_eos: true,
  };
  const whole = await client().chat.completions.create(request);
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.ok(whole.choices[0].message.content.length > 0);
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 10);

  const stream = await client().chat.completions.create({
    ...request, stream: true, stream_options: { include_usage: true },
  });
  let role = null;
  let content = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (choice.delta.role) role ??= choice.delta.role;
      content += choice.delta.content ?? '';
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(content, whole.choices[0].message.content);
  assert.equal(finish, 'length');
  // The same counts; the second request may find the first's prompt cached.
  const { prompt_tokens_details: details, ...counts } = usage;
  const { prompt_tokens_details: wholeDetails, ...wholeCounts } = whole.usage;
  assert.deepEqual(counts, wholeCounts);
  assert.ok(details.cached_tokens >= wholeDetails.cached_tokens, JSON.stringify(usage));
});

test('a second chat turn reports the first turn as cached prompt tokens', async () => {
  const system = 'You answer questions about the small birds of the valley: where they nest, '
    + 'what they eat, when they sing and where they go when the snow comes. Keep it short.';
  const messages = [{ role: 'system', content: system },
                    { role: 'user', content: 'Where do the wrens nest in spring?' }];
  const first = await client().chat.completions.create({
    model: modelId, messages, max_completion_tokens: 16, temperature: 0, ignore_eos: true,
  });
  assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0);
  messages.push({ role: 'assistant', content: first.choices[0].message.content },
                { role: 'user', content: 'And in winter?' });
  const stream = await client().chat.completions.create({
    model: modelId, messages, max_completion_tokens: 4, temperature: 0, ignore_eos: true,
    stream: true, stream_options: { include_usage: true },
  });
  let usage = null;
  for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
  assert.ok(usage.prompt_tokens_details.cached_tokens >= 0.9 * first.usage.prompt_tokens,
            `turn 1: ${JSON.stringify(first.usage)}, turn 2: ${JSON.stringify(usage)}`);
  assert.ok(usage.prompt_tokens_details.cached_tokens < usage.prompt_tokens);
});

test('stop strings end the text before them, streamed or not', async () => {
  const full = (await client().completions.create({ model: modelId, ...greedy, max_tokens: 16 }))
    .choices[0].text;
  assert.ok(full.length >= 12, full);
  const stop = full.substring(full.length / 2, full.length / 2 + 3);
  const expected = full.substring(0, full.indexOf(stop));

  const whole = await client().completions.create({ model: modelId, ...greedy, max_tokens: 16, stop });
  assert.equal(whole.choices[0].text, expected);
  assert.equal(whole.choices[0].finish_reason, 'stop');

  const stream = await client().completions.create({
    model: modelId, ...greedy, max_tokens: 16, stop: [stop], stream: true,
  });
  let text = '';
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      assert.ok(!choice.text.includes(stop), choice.text);
      text += choice.text;
    }
  }
  assert.equal(text, expected);
});

test('the same seed gives the same sampled text', async () => {
  const request = { model: modelId, prompt: PROMPT, max_tokens: 10, temperature: 0.9, seed: 7 };
  const a = await client().completions.create(request);
  const b = await client().completions.create(request);
  assert.ok(a.choices[0].text.length > 0);
  assert.equal(b.choices[0].text, a.choices[0].text);
});

test('a wrong API key is an AuthenticationError (401)', async () => {
  await assert.rejects(client('wrong-key').completions.create({ model: modelId, ...greedy }),
                       (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  await assert.rejects(client('wrong-key').models.list(),
                       (e) => e instanceof OpenAI.AuthenticationError);
});

test('malformed requests are BadRequestErrors (400) naming the field', async () => {
  await assert.rejects(client().completions.create({ model: modelId, ...greedy, n: 2 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
  await assert.rejects(
    client().completions.create({ model: modelId, ...greedy, temperature: 'hot' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature');
  await assert.rejects(
    client().completions.create({ model: modelId, ...greedy, max_tokens: 10000000 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_tokens');
  await assert.rejects(client().chat.completions.create({ model: modelId, messages: 'hi' }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages');
});
