// The official `openai` Node SDK against `pagoda serve`: chat and completions, streaming and
// not, and errors surfacing as the SDK's typed error classes.
// Needs PAGODA_BINARY and PAGODA_TESTDATA_DIR (set by CTest); run `npm ci` here first.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startTestServer, stopTestServer } from './server.mjs';

const apiKey = 'node-e2e-key';
let running;
let server;
let client;

before(async () => {
  running = await startTestServer({ apiKey, modelName: 'pagoda-test' });
  server = running.server;
  client = new OpenAI({ apiKey, baseURL: server.address + '/v1', maxRetries: 0 });
});

after(async () => {
  await stopTestServer(running);
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
