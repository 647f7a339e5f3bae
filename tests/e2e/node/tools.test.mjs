// Function calling with the official `openai` Node SDK, streaming and not. A random-weight model
// cannot be made to call a tool, so this drives `fake_tool_server` (tests/e2e): pagoda's HTTP
// layer over a fake engine whose "model" answers with the text of the last user message. The
// SDK's own stream helper (beta.chat.completions.stream) assembles the streamed tool calls.
// Needs PAGODA_FAKE_TOOL_SERVER (set by CTest); run `npm ci` here first.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startFakeServer, stopFakeServers } from './fake_server.mjs';

const client = async (parser) =>
  new OpenAI({ apiKey: 'unused', baseURL: (await startFakeServer(parser)) + '/v1', maxRetries: 0 });

let hermes;
let mistral;
before(async () => {
  hermes = await client('hermes');
  mistral = await client('mistral');
});

after(stopFakeServers);

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Current weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
  { type: 'function', function: { name: 'search', parameters: { type: 'object', properties: {} } } },
];

// What the scripted model will "say": the last user message.
const ask = (output, extra = {}) => ({
  model: 'fake-tools', messages: [{ role: 'user', content: output }], tools, ...extra,
});

const twoCalls = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
  + '<tool_call>\n{"name": "search", "arguments": {"q": "museums", "limit": 3}}\n</tool_call>';

test('tool calls, non-streaming', async () => {
  const r = await hermes.chat.completions.create(ask(twoCalls));
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.content, 'Checking.');
  assert.equal(c.message.tool_calls.length, 2);
  const [a, b] = c.message.tool_calls;
  assert.match(a.id, /^call_[A-Za-z0-9]{24}$/);
  assert.notEqual(a.id, b.id);
  assert.equal(a.type, 'function');
  assert.equal(a.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(a.function.arguments), { city: 'Paris' });
  assert.equal(b.function.arguments, '{"q":"museums","limit":3}');
});

test('tool calls, streaming: the SDK assembles the same calls', async () => {
  const full = await hermes.chat.completions.create(ask(twoCalls));
  const stream = hermes.beta.chat.completions.stream(ask(twoCalls, { stream_options: { include_usage: true } }));
  const names = [];
  stream.on('tool_calls.function.arguments.done', (e) => names.push(e.name));
  const final = await stream.finalChatCompletion();
  const c = final.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.content, 'Checking.');
  const strip = (calls) => calls.map((t) => ({ type: t.type, name: t.function.name, arguments: t.function.arguments }));
  assert.deepEqual(strip(c.message.tool_calls), strip(full.choices[0].message.tool_calls));
  assert.deepEqual(names, ['get_weather', 'search']);
  assert.equal(final.usage.completion_tokens, full.usage.completion_tokens);
});

test('tool calls, streaming by hand: index, id and name come first', async () => {
  const stream = await hermes.chat.completions.create(ask(twoCalls, { stream: true }));
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      for (const tc of c.delta.tool_calls ?? []) {
        if (tc.index === calls.length) {
          assert.ok(tc.id && tc.function.name, 'a new call starts with its id and name');
          calls.push({ id: tc.id, name: tc.function.name, arguments: tc.function.arguments ?? '' });
        } else {
          assert.equal(tc.index, calls.length - 1);
          calls[tc.index].arguments += tc.function.arguments;
        }
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.deepEqual(calls.map((c) => c.name), ['get_weather', 'search']);
  assert.deepEqual(JSON.parse(calls[0].arguments), { city: 'Paris' });
});

test('no call in the output: plain content, also with tool_choice required', async () => {
  for (const extra of [{}, { tool_choice: 'required' }, { tool_choice: 'none' }]) {
    const r = await hermes.chat.completions.create(ask('It is sunny <tool', extra));
    assert.equal(r.choices[0].message.content, 'It is sunny <tool');
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.ok(!r.choices[0].message.tool_calls?.length);
  }
  // tool_choice "none": a call in the output stays text.
  const r = await hermes.chat.completions.create(ask(twoCalls, { tool_choice: 'none' }));
  assert.equal(r.choices[0].message.content, twoCalls);
});

test('a named tool_choice must be one of the tools', async () => {
  const named = { type: 'function', function: { name: 'get_weather' } };
  const r = await hermes.chat.completions.create(ask(twoCalls, { tool_choice: named }));
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  await assert.rejects(
    hermes.chat.completions.create(ask('x', { tool_choice: { type: 'function', function: { name: 'nope' } } })),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice.function.name');
  await assert.rejects(
    hermes.chat.completions.create(ask('x', { tools: [{ type: 'function', function: {} }] })),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools[0].function.name');
});

test('a conversation continues with the call and its result', async () => {
  const first = await hermes.chat.completions.create(ask(twoCalls));
  const msg = first.choices[0].message;
  const next = await hermes.chat.completions.create({
    model: 'fake-tools',
    tools,
    messages: [
      { role: 'user', content: 'weather?' },
      msg,
      ...msg.tool_calls.map((t) => ({ role: 'tool', tool_call_id: t.id, content: '21 C' })),
      { role: 'user', content: 'It is 21 C in Paris.' },
    ],
  });
  assert.equal(next.choices[0].message.content, 'It is 21 C in Paris.');
});

test('mistral format: ids of 9 alphanumerics', async () => {
  const out = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Rome"}}]';
  const r = await mistral.chat.completions.create(ask(out));
  const call = r.choices[0].message.tool_calls[0];
  assert.match(call.id, /^[A-Za-z0-9]{9}$/);
  assert.equal(call.function.name, 'get_weather');
  assert.equal(r.choices[0].message.content, null);
});
