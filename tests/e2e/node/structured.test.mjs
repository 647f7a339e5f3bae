// Structured output through the official `openai` Node SDK against `pagoda serve`:
// beta.chat.completions.parse with a zod schema (zodResponseFormat) gives `message.parsed`
// satisfying the schema, streamed and not; tool_choice "required" and a named function yield
// tool calls whose arguments satisfy the function's zod parameters (zodFunction).
// Needs PAGODA_BINARY and PAGODA_TESTDATA_DIR (set by CTest); run `npm ci` here first.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { z } from 'zod';
import { zodResponseFormat, zodFunction } from 'openai/helpers/zod';
import { startTestServer, stopTestServer } from './server.mjs';

const apiKey = 'node-structured-key';
const model = 'pagoda-test';
let running;
let client;

before(async () => {
  running = await startTestServer({ apiKey, modelName: model, extraArgs: ['--max-seqs', '8'] });
  client = new OpenAI({ apiKey, baseURL: running.server.address + '/v1', maxRetries: 0 });
});

after(async () => {
  await stopTestServer(running);
});

// Bounded everywhere, so that a random-weight model finishes well inside max_tokens.
const Item = z.object({ sku: z.string().regex(/^[A-Z]{3}$/), qty: z.number().int().min(1).max(9) });
const Order = z.object({
  customer: z.string().min(1).max(8),
  priority: z.enum(['low', 'normal', 'high']),
  items: z.array(Item).min(1).max(2),
  gift: z.boolean(),
  note: z.string().max(6).nullable(),
});
const Weather = z.object({ city: z.string().min(1).max(12), unit: z.enum(['celsius', 'fahrenheit']) });
const Time = z.object({ tz: z.string().regex(/^[A-Z]{3}$/) });

const messages = [{ role: 'system', content: 'Reply in JSON.' }, { role: 'user', content: 'An order, please.' }];

test('beta.chat.completions.parse with zodResponseFormat: message.parsed satisfies the schema', async () => {
  const results = await Promise.all([1, 2, 3, 4].map((seed) => client.beta.chat.completions.parse({
    model, messages, response_format: zodResponseFormat(Order, 'order'),
    max_tokens: 300, temperature: 0.7, seed,
  })));
  for (const r of results) {
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop', JSON.stringify(c));
    assert.equal(typeof c.message.content, 'string');
    assert.ok(c.message.parsed && typeof c.message.parsed === 'object', JSON.stringify(c.message));
    assert.deepEqual(Order.parse(c.message.parsed), c.message.parsed);
    assert.deepEqual(c.message.parsed, JSON.parse(c.message.content));
    // Properties come in the order the schema lists them.
    assert.deepEqual(Object.keys(JSON.parse(c.message.content)), Object.keys(Order.shape));
  }
});

test('beta.chat.completions.stream with zodResponseFormat: the final message is parsed too', async () => {
  const stream = client.beta.chat.completions.stream({
    model, messages, response_format: zodResponseFormat(Order, 'order'),
    max_tokens: 300, temperature: 0.7, seed: 11,
  });
  const final = await stream.finalChatCompletion();
  const c = final.choices[0];
  assert.equal(c.finish_reason, 'stop');
  assert.deepEqual(Order.parse(c.message.parsed), c.message.parsed);
  // The same seeded request unstreamed gives the same object.
  const full = await client.beta.chat.completions.parse({
    model, messages, response_format: zodResponseFormat(Order, 'order'),
    max_tokens: 300, temperature: 0.7, seed: 11,
  });
  assert.deepEqual(full.choices[0].message.parsed, c.message.parsed);
});

test('json_object through the SDK parses as an object', async () => {
  const r = await client.chat.completions.create({
    model, messages, response_format: { type: 'json_object' }, max_tokens: 400, temperature: 0.7, seed: 5,
  });
  const c = r.choices[0];
  assert.ok(['stop', 'length'].includes(c.finish_reason));
  if (c.finish_reason === 'stop') {
    const v = JSON.parse(c.message.content);
    assert.equal(typeof v, 'object');
    assert.ok(v !== null && !Array.isArray(v));
  } else {
    assert.ok(c.message.content.startsWith('{'));
  }
});

test('a bad response_format is a typed 400 naming the parameter', async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages, response_format: { type: 'bogus' }, max_tokens: 4 }),
    (e) => e instanceof OpenAI.BadRequestError && typeof e.param === 'string' && e.param.startsWith('response_format'));
  await assert.rejects(
    client.chat.completions.create({
      model, messages, max_tokens: 4,
      response_format: { type: 'json_schema', json_schema: { name: 't', schema: { type: 5 }, strict: true } },
    }),
    (e) => e instanceof OpenAI.BadRequestError && typeof e.param === 'string' && e.param.startsWith('response_format'));
});

const tools = [
  zodFunction({ name: 'get_weather', description: 'Weather in a city', parameters: Weather }),
  zodFunction({ name: 'get_time', description: 'Time in a zone', parameters: Time }),
];
const toolMessages = [{ role: 'user', content: 'What is the weather in Paris?' }];

test('tool_choice "required" through the SDK yields tool_calls with valid arguments', async () => {
  const results = await Promise.all([1, 2, 3].map((seed) => client.beta.chat.completions.parse({
    model, messages: toolMessages, tools, tool_choice: 'required', max_tokens: 300, temperature: 0.7, seed,
  })));
  for (const r of results) {
    const c = r.choices[0];
    assert.ok(['tool_calls', 'stop'].includes(c.finish_reason), JSON.stringify(c));
    assert.ok(Array.isArray(c.message.tool_calls) && c.message.tool_calls.length >= 1, JSON.stringify(c.message));
    for (const call of c.message.tool_calls) {
      assert.equal(call.type, 'function');
      const schema = { get_weather: Weather, get_time: Time }[call.function.name];
      assert.ok(schema, 'unknown function ' + call.function.name);
      // parsed_arguments comes from zod's own parse of the arguments.
      assert.deepEqual(schema.parse(JSON.parse(call.function.arguments)), call.function.parsed_arguments);
    }
  }
});

test('a named tool_choice through the SDK, streamed: the call is to that function', async () => {
  const stream = client.beta.chat.completions.stream({
    model, messages: toolMessages, tools, max_tokens: 300, temperature: 0.7, seed: 9,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  const final = await stream.finalChatCompletion();
  const c = final.choices[0];
  assert.ok(Array.isArray(c.message.tool_calls) && c.message.tool_calls.length >= 1, JSON.stringify(c.message));
  for (const call of c.message.tool_calls) {
    assert.equal(call.function.name, 'get_weather');
    assert.deepEqual(Weather.parse(JSON.parse(call.function.arguments)), call.function.parsed_arguments);
  }
});
