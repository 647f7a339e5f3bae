// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) with Anthropic's own
// SDK from npm (`@anthropic-ai/sdk`): messages.create gathered and streamed (the raw events,
// and messages.stream's finalMessage == the gathered message), a tool round trip with
// tool_result, tool_choice any / tool, stop_sequences, countTokens, its typed errors, the key
// sent as x-api-key, and every byte split of an event stream parsed by the SDK's own parser.
// Drives `fake_tool_server`, whose "model" says what the last user message says
// (fake_server.mjs), so every answer is known. Needs PAGODA_FAKE_TOOL_SERVER (set by CTest);
// run `npm ci` here first.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { Stream } from '@anthropic-ai/sdk/streaming';
import { startFakeServer, stopFakeServers } from './fake_server.mjs';

const KEY = 'sekret-key';
let address;
let client;
before(async () => {
  address = await startFakeServer('hermes', ['--api-key', KEY]);
  client = new Anthropic({ apiKey: KEY, baseURL: address, maxRetries: 0 });  // sends x-api-key
});
after(stopFakeServers);

const tools = [{
  name: 'get_weather',
  description: 'Current weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];
const callText = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const textOf = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

test('anthropic SDK: messages.create, gathered', async () => {
  const m = await client.messages.create({
    model: 'fake-tools', max_tokens: 100, system: 'Echo.', messages: [{ role: 'user', content: 'Hello from the SDK.' }],
  });
  assert.match(m.id, /^msg_/);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.model, 'fake-tools');
  assert.deepEqual(m.content, [{ type: 'text', text: 'Hello from the SDK.' }]);
  assert.equal(m.stop_reason, 'end_turn');
  assert.equal(m.stop_sequence, null);
  assert.equal(m.usage.output_tokens, 'Hello from the SDK.'.length);
  const counted = await client.messages.countTokens({
    model: 'fake-tools', system: 'Echo.', messages: [{ role: 'user', content: 'Hello from the SDK.' }],
  });
  assert.ok(counted.input_tokens >= 'Hello from the SDK.'.length);
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, counted.input_tokens);
});

test('anthropic SDK: streamed events, and the stream folds into the gathered message', async () => {
  const req = { model: 'fake-tools', max_tokens: 100, messages: [{ role: 'user', content: 'Streamed words.' }] };
  const gathered = await client.messages.create(req);
  const types = [];
  let text = '';
  for await (const event of await client.messages.create({ ...req, stream: true })) {
    if (types.at(-1) !== event.type || event.type !== 'content_block_delta') types.push(event.type);
    if (event.type === 'content_block_delta') text += event.delta.text;
  }
  assert.deepEqual(types, ['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop',
    'message_delta', 'message_stop']);  // the SDK drops ping
  assert.equal(text, 'Streamed words.');
  // parsed_output and stop_details are the SDK's own additions to a streamed message.
  const { parsed_output: _p, stop_details: _s, ...final } = await client.messages.stream(req).finalMessage();
  assert.deepEqual({ ...final, id: '' }, { ...gathered, id: '' });
});

test('anthropic SDK: a tool round trip, gathered and streamed', async () => {
  const first = await client.messages.create({
    model: 'fake-tools', max_tokens: 200, tools, messages: [{ role: 'user', content: callText }],
  });
  assert.equal(first.stop_reason, 'tool_use');
  assert.equal(first.content.length, 2);
  assert.deepEqual(first.content[0], { type: 'text', text: 'Checking.' });
  const use = first.content[1];
  assert.equal(use.type, 'tool_use');
  assert.equal(use.name, 'get_weather');
  assert.deepEqual(use.input, { city: 'Paris' });
  const streamed = await client.messages.stream({
    model: 'fake-tools', max_tokens: 200, tools, messages: [{ role: 'user', content: callText }],
  }).finalMessage();
  assert.deepEqual(streamed.content[1].input, { city: 'Paris' });
  assert.equal(streamed.stop_reason, 'tool_use');
  const second = await client.messages.create({
    model: 'fake-tools', max_tokens: 200, tools,
    messages: [
      { role: 'user', content: callText },
      { role: 'assistant', content: first.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '21 C' }] },
    ],
  });
  assert.equal(textOf(second), 'Tool said: 21 C');
  assert.equal(second.stop_reason, 'end_turn');
});

test('anthropic SDK: tool_choice any and tool', async () => {
  for (const tool_choice of [{ type: 'any' }, { type: 'tool', name: 'get_weather' }]) {
    const m = await client.messages.create({
      model: 'fake-tools', max_tokens: 200, tools, tool_choice, messages: [{ role: 'user', content: callText }],
    });
    assert.equal(m.stop_reason, 'tool_use', JSON.stringify(tool_choice));
    assert.deepEqual(m.content.at(-1).input, { city: 'Paris' });
  }
});

test('anthropic SDK: stop_sequences and max_tokens', async () => {
  const stopped = await client.messages.create({
    model: 'fake-tools', max_tokens: 100, stop_sequences: ['#'], messages: [{ role: 'user', content: 'one two # three' }],
  });
  assert.equal(stopped.stop_reason, 'stop_sequence');
  assert.equal(stopped.stop_sequence, '#');
  assert.equal(textOf(stopped), 'one two ');
  const cut = await client.messages.create({
    model: 'fake-tools', max_tokens: 3, messages: [{ role: 'user', content: 'one two three' }],
  });
  assert.equal(cut.stop_reason, 'max_tokens');
  assert.equal(textOf(cut), 'one');
});

test('anthropic SDK: typed errors', async () => {
  await assert.rejects(
    client.messages.create({ model: 'claude-nope', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof Anthropic.NotFoundError && e.error.type === 'error' && e.error.error.type === 'not_found_error');
  await assert.rejects(
    client.messages.create({
      model: 'fake-tools', max_tokens: 10,
      messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }],
    }),
    (e) => e instanceof Anthropic.BadRequestError && /text-only/.test(e.error.error.message));
  const wrong = new Anthropic({ apiKey: 'wrong', baseURL: address, maxRetries: 0 });
  await assert.rejects(
    wrong.messages.create({ model: 'fake-tools', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof Anthropic.AuthenticationError && e.error.error.type === 'authentication_error');
});

test('anthropic SDK: every byte split of the event stream parses the same with the SDK parser', async () => {
  const res = await fetch(address + '/v1/messages', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': KEY, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'fake-tools', max_tokens: 200, tools, stream: true,
      messages: [{ role: 'user', content: 'Ünïcode ✓ ' + callText }] }),
  });
  assert.equal(res.status, 200);
  const bytes = new Uint8Array(await res.arrayBuffer());
  const parse = async (chunks) => {
    const body = new ReadableStream({ start(c) { for (const chunk of chunks) c.enqueue(chunk); c.close(); } });
    const events = [];
    for await (const e of Stream.fromSSEResponse(new Response(body), new AbortController())) events.push(e);
    return events;
  };
  const whole = await parse([bytes]);
  assert.equal(whole[0].type, 'message_start');
  assert.equal(whole.at(-1).type, 'message_stop');
  assert.ok(whole.some((e) => e.delta?.type === 'input_json_delta'));
  for (let k = 1; k < bytes.length; ++k)
    assert.deepEqual(await parse([bytes.subarray(0, k), bytes.subarray(k)]), whole, `split at byte ${k}`);
});
