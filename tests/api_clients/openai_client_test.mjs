// The official `openai` npm client (pinned in package.json) against
// `colibri-coordinator serve --http-listen`: completions and chat (the
// ChatML default template), streamed and not, response_format json_schema and
// json_object and tool_choice required / named (validated with ajv; also for
// the GLM-4.5 and gpt-oss fixtures with their templates), stop strings, seed reproducibility, a second
// chat turn's cached prompt tokens (usage.prompt_tokens_details), an auth failure and
// malformed requests; API keys apart from the cluster token (--api-key-file),
// CORS for a browser page's origin (--cors-origin, the preflight with curl) and
// a full queue's 429 with Retry-After (--max-queued), and HTTPS
// (--http-tls-cert, certificates from deploy/make-certs.sh). Run by CTest through
// run_openai_client_test.sh:
//
//   node openai_client_test.mjs COORDINATOR MODEL.gguf
//
// Exits 77 (CTest's skip code) when the client library is not installed.
import { after, before, test } from 'node:test';
import { randomBytes } from 'node:crypto';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';

let OpenAI;
let Ajv;
try {
  ({ default: OpenAI } = await import('openai'));
  ({ default: Ajv } = await import('ajv'));
} catch {
  console.log('SKIP: the openai or ajv package is not installed (npm ci in tests/api_clients)');
  process.exit(77);
}

const [coordinator, modelPath] = process.argv.slice(2);
// Keys as `openssl rand -hex 32` makes (the server refuses short ones): the
// API keys of --api-key-file, and the cluster token, which the HTTP API then
// does not accept.
const TOKEN = randomBytes(32).toString('hex');
const SECOND_KEY = randomBytes(32).toString('hex');
const CLUSTER_TOKEN = randomBytes(32).toString('hex');
const ORIGIN = 'https://chat.example.org';
const PROMPT = 'The small birds of the valley';
const servers = [];
let baseURL;
let modelId;

// Starts serve on loopback with a cluster token and API keys, and resolves
// with the HTTP address.
function startServe(extraArgs = [], model = modelPath) {
  const dir = mkdtempSync(join(tmpdir(), 'colibri-openai-'));
  const tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, CLUSTER_TOKEN + '\n');
  const keyFile = join(dir, 'keys');
  writeFileSync(keyFile, `# the tests\n${TOKEN}\n${SECOND_KEY}\n`);
  const server = spawn(coordinator, ['serve', '--model', model, '--listen', '127.0.0.1:0',
                                     '--http-listen', '127.0.0.1:0', '--threads', '1',
                                     '--auth-token-file', tokenFile, '--api-key-file', keyFile,
                                     '--cors-origin', ORIGIN, ...extraArgs],
                       { stdio: ['ignore', 'pipe', 'inherit'] });
  servers.push(server);
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

function client(apiKey = TOKEN, url = baseURL) {
  return new OpenAI({ apiKey, baseURL: url, maxRetries: 0, timeout: 120000 });
}

before(async () => {
  baseURL = `http://${await startServe()}/v1`;
  const models = await client().models.list();
  modelId = models.data[0].id;
});

after(() => {
  for (const server of servers) server.kill('SIGTERM');
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

// Bounded strings, enums and arrays: at temperature 1.0 every answer of the
// random-weight model is a complete instance.
const RATING_SCHEMA = {
  type: 'object',
  properties: {
    verdict: { enum: ['good', 'bad', 'unsure'] },
    stars: { type: 'integer', minimum: 1, maximum: 5 },
    words: { type: 'array', items: { type: 'string', maxLength: 5 }, maxItems: 3 },
    note: { type: ['string', 'null'], maxLength: 10 },
  },
  required: ['verdict', 'stars', 'words', 'note'],
  additionalProperties: false,
};

test('response_format json_schema answers validate (ajv), streamed or not', async () => {
  const validate = new Ajv().compile(RATING_SCHEMA);
  for (const seed of [1, 2, 3, 4]) {
    const request = {
      model: modelId,
      messages: [{ role: 'user', content: 'Rate the valley.' }],
      max_completion_tokens: 200, temperature: 1.0, seed,
      response_format: {
        type: 'json_schema', json_schema: { name: 'rating', strict: true, schema: RATING_SCHEMA },
      },
    };
    const whole = await client().chat.completions.create(request);
    const content = whole.choices[0].message.content;
    assert.ok(validate(JSON.parse(content)), `${content}: ${JSON.stringify(validate.errors)}`);
    assert.equal(whole.choices[0].finish_reason, 'stop');

    let streamed = '';
    let finish = null;
    for await (const chunk of await client().chat.completions.create({ ...request, stream: true })) {
      for (const choice of chunk.choices) {
        streamed += choice.delta.content ?? '';
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    }
    assert.equal(streamed, content);
    assert.equal(finish, 'stop');
  }
});

test('response_format json_object gives an object, or its prefix when cut', async () => {
  const whole = await client().completions.create({
    model: modelId, prompt: PROMPT, max_tokens: 80, temperature: 1.0, seed: 9,
    response_format: { type: 'json_object' },
  });
  const { text, finish_reason: finish } = whole.choices[0];
  assert.ok(text.startsWith('{'), text);
  if (finish === 'stop') {
    const value = JSON.parse(text);
    assert.equal(typeof value, 'object');
    assert.ok(value !== null && !Array.isArray(value), text);
  } else {
    assert.equal(finish, 'length');
  }
});

test('a response_format schema that cannot be enforced is a BadRequestError naming it', async () => {
  await assert.rejects(client().chat.completions.create({
    model: modelId, messages: [{ role: 'user', content: 'hi' }],
    response_format: {
      type: 'json_schema',
      json_schema: { name: 'x', schema: { type: 'string', pattern: '(?<=a)b' } },
    },
  }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'response_format'
    && e.message.includes('pattern'));
});

const WEATHER_PARAMETERS = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 8 },
    unit: { enum: ['c', 'f'] },
    days: { type: 'integer', minimum: 1, maximum: 7 },
  },
  required: ['city', 'unit', 'days'],
  additionalProperties: false,
};
const NOW_PARAMETERS = { type: 'object', properties: {}, additionalProperties: false };
const TOOLS = [
  // Descriptions given: gpt-oss's template reads them.
  { type: 'function',
    function: { name: 'get_weather', description: 'the forecast', parameters: WEATHER_PARAMETERS } },
  { type: 'function', function: { name: 'now', description: 'the time', parameters: NOW_PARAMETERS } },
];

// tool_choice required and named against the server at `url`, seeds 1..seeds
// at temperature 1.0 (parallel calls with odd seeds unless oneCall): every
// reply is tool_calls whose arguments validate, whole and streamed alike.
async function checkForcedToolCalls(url, seeds, oneCall = false) {
  const validators = {
    get_weather: new Ajv().compile(WEATHER_PARAMETERS),
    now: new Ajv().compile(NOW_PARAMETERS),
  };
  const checkCall = (call, names) => {
    assert.ok(typeof call.id === 'string' && call.id.length > 0, JSON.stringify(call));
    assert.equal(call.type, 'function');
    assert.ok(names.includes(call.function.name), call.function.name);
    const validate = validators[call.function.name];
    const args = JSON.parse(call.function.arguments);
    assert.ok(validate(args), `${call.function.arguments}: ${JSON.stringify(validate.errors)}`);
  };
  const named = { type: 'function', function: { name: 'get_weather' } };
  for (const [choice, names] of [['required', ['get_weather', 'now']], [named, ['get_weather']]]) {
    for (let seed = 1; seed <= seeds; ++seed) {
      const request = {
        model: modelId, messages: [{ role: 'user', content: 'Weather in Oslo this week?' }],
        tools: TOOLS, tool_choice: choice, parallel_tool_calls: seed % 2 === 1,
        max_completion_tokens: 300, temperature: 1.0, seed,
      };
      const whole = await client(TOKEN, url).chat.completions.create(request);
      const { message, finish_reason: finish } = whole.choices[0];
      assert.equal(finish, 'tool_calls', JSON.stringify(whole));
      assert.ok(message.tool_calls.length >= 1, JSON.stringify(message));
      if (seed % 2 === 0 || oneCall) assert.equal(message.tool_calls.length, 1);
      for (const call of message.tool_calls) checkCall(call, names);

      const streamed = [];
      let streamedFinish = null;
      const stream = await client(TOKEN, url).chat.completions.create({ ...request, stream: true });
      for await (const chunk of stream) {
        for (const c of chunk.choices) {
          for (const call of c.delta.tool_calls ?? []) {
            assert.equal(call.index, streamed.length);
            streamed.push(call);
          }
          if (c.finish_reason) streamedFinish = c.finish_reason;
        }
      }
      assert.equal(streamedFinish, 'tool_calls');
      assert.deepEqual(streamed.map((c) => c.function), message.tool_calls.map((c) => c.function));
      for (const call of streamed) checkCall(call, names);
    }
  }
}

// serve with a chat template of the fixtures' chat_templates/ (their JSON
// files hold it under "template"); resolves with the API's URL.
async function startServeWithTemplate(model, templateFixture) {
  const fixtures = dirname(dirname(modelPath));
  const template = JSON.parse(
    readFileSync(join(fixtures, 'chat_templates', templateFixture), 'utf8')).template;
  const file = join(mkdtempSync(join(tmpdir(), 'colibri-template-')), 'template.jinja');
  writeFileSync(file, template);
  const address = await startServe(['--chat-template-file', file],
                                   join(fixtures, 'models', model));
  return `http://${address}/v1`;
}

test('tool_choice required and named give tool_calls whose arguments validate (ajv)', async () => {
  await checkForcedToolCalls(baseURL, 8);
  await assert.rejects(client().chat.completions.create({
    model: modelId, messages: [{ role: 'user', content: 'hi' }], tools: TOOLS,
    tool_choice: { type: 'function', function: { name: 'absent' } },
  }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');
});

test('forced tool calls validate for GLM-4.5 (key/value pairs) and gpt-oss (harmony)', async () => {
  await checkForcedToolCalls(
    await startServeWithTemplate('glm4moe-tiny-q4_k_m.gguf', 'GLM-4.6.json'), 8);
  await checkForcedToolCalls(
    await startServeWithTemplate('gpt-oss-tiny-mxfp4.gguf', 'openai-gpt-oss-120b.json'), 8, true);
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

test('any key of the key file works, the cluster token does not', async () => {
  const models = await client(SECOND_KEY).models.list();
  assert.equal(models.data[0].id, modelId);
  await assert.rejects(client(CLUSTER_TOKEN).models.list(), (e) => e instanceof OpenAI.AuthenticationError);
});

test('a page of the allowed origin reads the answers, streamed or not (CORS)', async () => {
  // What a browser checks: the Access-Control-Allow-Origin of every answer.
  const seen = [];
  const fetchFromPage = async (url, init) => {
    const headers = new Headers(init.headers);
    headers.set('Origin', ORIGIN);
    const res = await fetch(url, { ...init, headers });
    seen.push(res.headers.get('access-control-allow-origin'));
    return res;
  };
  const page = new OpenAI({ apiKey: TOKEN, baseURL, maxRetries: 0, fetch: fetchFromPage });
  const whole = await page.chat.completions.create({
    model: modelId, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, temperature: 0,
  });
  assert.ok(whole.choices[0].message.content.length > 0);
  let text = '';
  for await (const chunk of await page.completions.create({ model: modelId, ...greedy, stream: true })) {
    for (const choice of chunk.choices) text += choice.text;
  }
  assert.ok(text.length > 0);
  await assert.rejects(new OpenAI({ apiKey: 'wrong', baseURL, maxRetries: 0, fetch: fetchFromPage })
    .models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  assert.deepEqual(seen, [ORIGIN, ORIGIN, ORIGIN]);
});

test('the preflight of a chat request is answered without a key (curl)', () => {
  const url = `${baseURL}/chat/completions`;
  const preflight = (origin) => spawnSync('curl', ['-s', '-i', '-X', 'OPTIONS', '-H', `Origin: ${origin}`,
    '-H', 'Access-Control-Request-Method: POST',
    '-H', 'Access-Control-Request-Headers: authorization, content-type', url], { encoding: 'utf8' });
  const ok = preflight(ORIGIN);
  assert.equal(ok.status, 0, ok.stderr);
  assert.match(ok.stdout, /^HTTP\/1\.1 204/);
  assert.match(ok.stdout, new RegExp(`^Access-Control-Allow-Origin: ${ORIGIN}\r$`, 'm'));
  assert.match(ok.stdout, /^Access-Control-Allow-Methods: .*POST/m);
  assert.match(ok.stdout, /^Access-Control-Allow-Headers: authorization, content-type\r$/m);
  const other = preflight('https://elsewhere.example');
  assert.match(other.stdout, /^HTTP\/1\.1 403/);
  assert.doesNotMatch(other.stdout, /Access-Control-Allow-Origin/);
});

test('a full queue is a RateLimitError (429) with Retry-After', async () => {
  const full = `http://${await startServe(['--max-queued', '0'])}/v1`;
  const error = await new OpenAI({ apiKey: TOKEN, baseURL: full, maxRetries: 0 })
    .completions.create({ model: modelId, ...greedy }).then(() => null, (e) => e);
  assert.ok(error instanceof OpenAI.RateLimitError, String(error));
  assert.equal(error.headers.get('retry-after'), '1');
});

test('over HTTPS the client talks to the API with the lab CA, and plain HTTP is refused', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'colibri-https-'));
  const certs = spawnSync('bash', [fileURLToPath(new URL('../../deploy/make-certs.sh', import.meta.url)),
    join(dir, 'lab'), 'localhost,127.0.0.1'], { encoding: 'utf8' });
  assert.equal(certs.status, 0, certs.stderr);
  const host = join(dir, 'lab', 'localhost');
  const address = await startServe(['--http-tls-cert', join(host, 'host.crt'),
                                    '--http-tls-key', join(host, 'host.key')]);
  const port = address.split(':').pop();
  // Node reads extra CAs at start-up only: the client runs in a child that
  // trusts the lab CA, as a user's NODE_EXTRA_CA_CERTS would.
  const script = `
    import OpenAI from 'openai';
    const c = new OpenAI({ apiKey: process.env.KEY, baseURL: process.env.URL, maxRetries: 0 });
    const r = await c.completions.create({ model: process.env.MODEL, prompt: 'Hi', max_tokens: 3,
                                           temperature: 0, ignore_eos: true });
    let streamed = '';
    for await (const chunk of await c.completions.create({ model: process.env.MODEL, prompt: 'Hi',
        max_tokens: 3, temperature: 0, ignore_eos: true, stream: true })) {
      for (const choice of chunk.choices) streamed += choice.text;
    }
    console.log(JSON.stringify({ text: r.choices[0].text, streamed }));`;
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: fileURLToPath(new URL('.', import.meta.url)), encoding: 'utf8', timeout: 120000,
    env: { ...process.env, NODE_EXTRA_CA_CERTS: join(dir, 'lab', 'ca.crt'), KEY: TOKEN,
           URL: `https://localhost:${port}/v1`, MODEL: modelId },
  });
  assert.equal(child.status, 0, child.stderr);
  const out = JSON.parse(child.stdout);
  assert.ok(out.text.length > 0);
  assert.equal(out.streamed, out.text);
  // Without the CA the certificate is not trusted; plain HTTP gets no answer.
  const untrusted = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: fileURLToPath(new URL('.', import.meta.url)), encoding: 'utf8', timeout: 120000,
    env: { ...process.env, KEY: TOKEN, URL: `https://localhost:${port}/v1`, MODEL: modelId },
  });
  assert.notEqual(untrusted.status, 0);
  const plain = spawnSync('curl', ['-s', '-o', '/dev/null', '-w', '%{http_code}', '--max-time', '5',
    `http://localhost:${port}/health`], { encoding: 'utf8' });
  assert.notEqual(plain.stdout, '200');
});
