// @grpc/grpc-js with @grpc/proto-loader (pinned in package.json) against
// `colibri-coordinator serve`'s gRPC API, loaded from the repository's
// proto/colibri/v1/inference.proto: streaming Generate against `run`'s greedy
// text, Tokenize, ModelInfo, a chat prompt, grpc.health.v1, an auth failure,
// and cancelling mid-stream (the server's active generations return to 0,
// read from ClusterStatus and from /metrics). Run by CTest through
// run_grpc_client_test.sh:
//
//   node grpc_client_test.mjs COORDINATOR MODEL.gguf PROTO_DIR
//
// Exits 77 (CTest's skip code) when the packages are not installed.
import { after, before, test } from 'node:test';
import { randomBytes } from 'node:crypto';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

let grpc;
let protoLoader;
try {
  grpc = await import('@grpc/grpc-js');
  protoLoader = await import('@grpc/proto-loader');
} catch {
  console.log('SKIP: @grpc/grpc-js or @grpc/proto-loader is not installed (npm ci in tests/api_clients)');
  process.exit(77);
}

const [coordinator, modelPath, protoDir] = process.argv.slice(2);
const here = dirname(fileURLToPath(import.meta.url));
// A token as `openssl rand -hex 32` makes (the server refuses short ones).
const TOKEN = randomBytes(32).toString('hex');
const PROMPT = 'The small birds of the valley';
let server;
let grpcAddress;
let httpAddress;
let Inference;
let Health;

// Starts serve on loopback with a token; resolves once both listeners are up.
function startServe() {
  const dir = mkdtempSync(join(tmpdir(), 'colibri-grpc-'));
  const tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, TOKEN + '\n');
  // A context far longer than any generation here, so that the one cancelled
  // below is still running when the cancel arrives.
  server = spawn(coordinator, ['serve', '--model', modelPath, '--listen', '127.0.0.1:0',
                               '--http-listen', '127.0.0.1:0', '--threads', '1',
                               '--ctx-size', '65536', '--auth-token-file', tokenFile],
                 { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('serve did not start in 60 s')), 60000);
    server.on('exit', (code) => reject(new Error(`serve exited with ${code}`)));
    createInterface({ input: server.stdout }).on('line', (line) => {
      let m = /^listening on (.*)$/.exec(line);
      if (m) grpcAddress = m[1];
      m = /^http listening on (.*)$/.exec(line);
      if (m) {
        httpAddress = m[1];
        clearTimeout(timer);
        resolve();
      }
    });
  });
}

function metadata(token = TOKEN) {
  const md = new grpc.Metadata();
  if (token) md.set('authorization', `Bearer ${token}`);
  return md;
}

function inference() {
  return new Inference(grpcAddress, grpc.credentials.createInsecure());
}

// A unary call as a promise.
function unary(client, method, request, md = metadata()) {
  return new Promise((resolve, reject) => {
    client[method](request, md, (err, reply) => (err ? reject(err) : resolve(reply)));
  });
}

// A Generate stream collected: its replies, or the error it ended with.
function generate(request, md = metadata()) {
  return new Promise((resolve, reject) => {
    const replies = [];
    const call = inference().Generate(request, md);
    call.on('data', (r) => replies.push(r));
    call.on('error', reject);
    call.on('end', () => resolve(replies));
  });
}

async function activeGenerations() {
  const status = await unary(inference(), 'ClusterStatus', {});
  return status.active_generations;
}

before(async () => {
  const options = { keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true };
  const inferenceDef = protoLoader.loadSync('colibri/v1/inference.proto',
                                            { ...options, includeDirs: [protoDir] });
  Inference = grpc.loadPackageDefinition(inferenceDef).colibri.v1.Inference;
  const healthDef = protoLoader.loadSync(join(here, 'health.proto'), options);
  Health = grpc.loadPackageDefinition(healthDef).grpc.health.v1.Health;
  await startServe();
});

after(() => {
  if (server) server.kill('SIGKILL');
});

test('ModelInfo describes the served model', async () => {
  const info = await unary(inference(), 'ModelInfo', {});
  assert.ok(info.architecture.length > 0);
  assert.ok(info.n_vocab > 0);
  assert.ok(info.n_layer > 0);
  assert.equal(info.n_ctx, 65536);
});

test('Tokenize gives ids within the vocabulary', async () => {
  const info = await unary(inference(), 'ModelInfo', {});
  const reply = await unary(inference(), 'Tokenize', { text: PROMPT });
  assert.ok(reply.ids.length > 0);
  for (const id of reply.ids) assert.ok(id >= 0 && id < info.n_vocab);
});

test('streaming Generate gives the text of `run` for a greedy request', async () => {
  const expected = execFileSync(coordinator, ['run', '--model', modelPath, '--prompt', PROMPT,
                                              '--threads', '1', '-n', '8', '--temp', '0',
                                              '--ignore-eos'],
                                { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).replace(/\n$/, '');
  const replies = await generate({ text: PROMPT, max_tokens: 8, ignore_eos: true,
                                   sampling: { temperature: 0 } });
  const last = replies[replies.length - 1];
  assert.equal(last.done, true);
  assert.equal(last.finish_reason, 'FINISH_REASON_LENGTH');
  assert.equal(last.stats.generated_tokens, 8);
  assert.equal(replies.length, 9, 'one reply per token, then the last one');
  assert.equal(replies.map((r) => r.text).join(''), expected);
});

test('a chat prompt is templated by the server', async () => {
  const replies = await generate({ chat: { messages: [{ role: 'user', content: 'Hello' }] },
                                   max_tokens: 3, sampling: { temperature: 0 } });
  const last = replies[replies.length - 1];
  assert.equal(last.done, true);
  // The template adds its markup around the 1-token message.
  assert.ok(last.stats.prompt_tokens > 3, `prompt_tokens ${last.stats.prompt_tokens}`);
});

test('grpc.health.v1 reports SERVING for the server and the Inference service', async () => {
  const health = new Health(grpcAddress, grpc.credentials.createInsecure());
  assert.equal((await unary(health, 'Check', { service: '' }, new grpc.Metadata())).status,
               'SERVING');
  assert.equal((await unary(health, 'Check', { service: 'colibri.v1.Inference' },
                            new grpc.Metadata())).status, 'SERVING');
});

test('a missing or wrong token is UNAUTHENTICATED', async () => {
  await assert.rejects(unary(inference(), 'ModelInfo', {}, metadata(null)),
                       (err) => err.code === grpc.status.UNAUTHENTICATED);
  await assert.rejects(generate({ text: PROMPT, max_tokens: 2 }, metadata('wrong-token')),
                       (err) => err.code === grpc.status.UNAUTHENTICATED);
});

test('cancelling mid-stream stops the generation on the server', async () => {
  const call = inference().Generate({ text: PROMPT, max_tokens: 60000, ignore_eos: true,
                                      sampling: { temperature: 0 } }, metadata());
  const ended = new Promise((resolve) => {
    call.on('error', (err) => resolve(err));
    call.on('end', () => resolve(null));
  });
  await new Promise((resolve) => call.once('data', resolve));
  assert.equal(await activeGenerations(), 1);
  call.cancel();
  const err = await ended;
  assert.ok(err, 'the stream ends with an error');
  assert.equal(err.code, grpc.status.CANCELLED);

  let active = -1;
  for (let i = 0; i < 600 && active !== 0; i++) {
    active = await activeGenerations();
    if (active !== 0) await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(active, 0, 'the cancelled generation is still running');
  const res = await fetch(`http://${httpAddress}/metrics`,
                          { headers: { authorization: `Bearer ${TOKEN}` } });
  assert.equal(res.status, 200);
  const text = await res.text();
  assert.match(text, /\ncolibri_active_generations 0\n/);
  assert.match(text, /\ncolibri_generations_total\{outcome="CANCELLED"\} 1\n/);
});
