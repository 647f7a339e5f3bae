// The official `openai` Node SDK against `pagoda serve`: chat and completions, streaming and
// not, and errors surfacing as the SDK's typed error classes.
// Needs PAGODA_BINARY and PAGODA_TESTDATA_DIR (set by CTest); run `npm ci` here first.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';

const binary = process.env.PAGODA_BINARY;
const testdata = process.env.PAGODA_TESTDATA_DIR;
const apiKey = 'node-e2e-key';
let server;
let client;
let dir;

// Starts the server on a free port (--port 0) and reads the address from its JSON log.
function startServer(args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(binary, ['serve', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const timer = setTimeout(() => reject(new Error('server did not start:\n' + out)), 60000);
    const onData = (chunk) => {
      out += chunk.toString();
      for (const line of out.split('\n')) {
        if (!line.startsWith('{')) continue;
        let j;
        try { j = JSON.parse(line); } catch { continue; }
        if (j.msg === 'pagoda serving') {
          clearTimeout(timer);
          proc.stdout.off('data', onData);
          proc.stdout.resume();
          resolve({ proc, address: j.address });
          return;
        }
      }
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', (c) => { out += c.toString(); });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}:\n${out}`)); });
  });
}

before(async () => {
  assert.ok(binary && testdata, 'PAGODA_BINARY and PAGODA_TESTDATA_DIR must be set');
  dir = mkdtempSync(join(tmpdir(), 'pagoda-node-'));
  const model = join(dir, 'model.gguf');
  execFileSync(binary, ['make-model', '--output', model,
    '--vocab-from', join(testdata, 'vocab/ggml-vocab-phi-3.gguf'),
    '--layers', '2', '--dim', '64', '--ff', '128', '--heads', '4', '--kv-heads', '2',
    '--ctx', '512', '--quiet']);
  server = await startServer(['--model', model, '--port', '0', '--host', '127.0.0.1',
    '--chat-template', join(testdata, 'chat-templates/templates/microsoft-Phi-3-mini-gguf.jinja'),
    '--threads', '1', '--ctx-size', '512', '--kv-cache-memory', '32MiB',
    '--api-key', apiKey, '--log-format', 'json', '--served-model-name', 'pagoda-test']);
  client = new OpenAI({ apiKey, baseURL: server.address + '/v1', maxRetries: 0 });
});

after(async () => {
  if (server) {
    const exited = new Promise((r) => server.proc.on('exit', (code) => r(code)));
    server.proc.kill('SIGTERM');
    assert.equal(await exited, 0);
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello there' }];

test('models.list', async () => {
  const page = await client.models.list();
  assert.equal(page.data[0].id, 'pagoda-test');
  const m = await client.models.retrieve('pagoda-test');
  assert.equal(m.object, 'model');
  await assert.rejects(client.models.retrieve('gpt-9'), (e) => e instanceof OpenAI.NotFoundError);
});

test('chat completion, non-streaming', async () => {
  const r = await client.chat.completions.create({
    model: 'pagoda-test', messages, max_tokens: 8, temperature: 0, ignore_eos: true,
  });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 8);
});

test('chat completion, streaming equals non-streaming', async () => {
  const params = { model: 'pagoda-test', messages, max_tokens: 12, temperature: 0, ignore_eos: true };
  const full = await client.chat.completions.create(params);
  const stream = await client.chat.completions.create({
    ...params, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let role = null;
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role && role === null) role = c.delta.role;
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(text, full.choices[0].message.content);
  assert.equal(finish, 'length');
  assert.deepEqual(usage.completion_tokens, full.usage.completion_tokens);
});

test('completions, streaming and not', async () => {
  const params = { model: 'pagoda-test', prompt: 'The quick brown fox', max_tokens: 10, temperature: 0 };
  const full = await client.completions.create(params);
  assert.equal(full.object, 'text_completion');
  const stream = await client.completions.create({ ...params, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, full.choices[0].text);
});

test('errors are typed', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'pagoda-test', messages: [], max_tokens: 1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'messages');
  await assert.rejects(
    client.chat.completions.create({ model: 'pagoda-test', messages, temperature: -1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature');
  const long = 'word '.repeat(700);
  await assert.rejects(
    client.completions.create({ model: 'pagoda-test', prompt: long }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
  const wrongKey = new OpenAI({ apiKey: 'nope', baseURL: server.address + '/v1', maxRetries: 0 });
  await assert.rejects(wrongKey.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  const raw = await fetch(server.address + '/v1/nothing', { headers: { Authorization: 'Bearer ' + apiKey } });
  assert.equal(raw.status, 404);
  assert.equal((await raw.json()).error.code, 'not_found');
});

// Function calling against the real server (a random-weight model will not call a tool; the
// calls themselves are tested in tools.test.mjs with scripted output).
test('tools are accepted and validated', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } }];
  const r = await client.chat.completions.create({
    model: 'pagoda-test', messages, tools, tool_choice: 'auto', max_tokens: 6, temperature: 0, ignore_eos: true,
  });
  assert.ok(['length', 'tool_calls'].includes(r.choices[0].finish_reason));
  assert.ok(typeof r.choices[0].message.content === 'string' || r.choices[0].message.tool_calls.length > 0);
  await assert.rejects(
    client.chat.completions.create({
      model: 'pagoda-test', messages, tools, tool_choice: { type: 'function', function: { name: 'nope' } },
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice.function.name');
});
