// The Responses API (POST /v1/responses) with the clients that call it, from npm: the official
// `openai` SDK (responses.create, streaming and not, and a function tool round trip through
// previous_response_id), the Vercel AI SDK's default `openai("model")` provider (generateText,
// streamText) and LangChain's ChatOpenAI with useResponsesApi. Drives `fake_tool_server`, whose
// "model" says what the last user message says (fake_server.mjs), so every answer is known.
// Needs PAGODA_FAKE_TOOL_SERVER (set by CTest); run `npm ci` here first.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText } from 'ai';
import { ChatOpenAI } from '@langchain/openai';
import { startFakeServer, stopFakeServers } from './fake_server.mjs';

let address;
let client;
before(async () => {
  address = await startFakeServer('hermes');
  client = new OpenAI({ apiKey: 'unused', baseURL: address + '/v1', maxRetries: 0 });
});
after(stopFakeServers);

const tools = [{
  type: 'function',
  name: 'get_weather',
  description: 'Current weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  strict: false,
}];
const callText = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';

const textOf = (response) => response.output
  .filter((i) => i.type === 'message')
  .flatMap((i) => i.content.map((p) => p.text))
  .join('');

test('openai SDK: responses.create, gathered', async () => {
  const r = await client.responses.create({ model: 'fake-tools', input: 'Hello from the SDK.', instructions: 'Echo.' });
  assert.match(r.id, /^resp_/);
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'completed');
  assert.equal(r.instructions, 'Echo.');
  assert.equal(textOf(r), 'Hello from the SDK.');
  assert.equal(r.output_text, 'Hello from the SDK.');  // the SDK's own convenience field
  assert.equal(r.usage.output_tokens, 'Hello from the SDK.'.length);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
  const again = await client.responses.retrieve(r.id);
  const { output_text: _, ...stored } = r;  // output_text is the SDK's, added by create only
  assert.deepEqual({ ...again, output_text: undefined }, { ...stored, output_text: undefined });
  const deleted = await client.responses.del(r.id);
  assert.ok(deleted === undefined || deleted === null || deleted.deleted === true);
  await assert.rejects(client.responses.retrieve(r.id), (e) => e instanceof OpenAI.NotFoundError);
});

test('openai SDK: responses.create, streamed', async () => {
  const stream = await client.responses.create({ model: 'fake-tools', input: 'Streamed words.', stream: true });
  const types = [];
  let text = '';
  let final;
  for await (const event of stream) {
    types.push(event.type);
    assert.equal(event.sequence_number, types.length - 1);
    if (event.type === 'response.output_text.delta') text += event.delta;
    if (event.type === 'response.completed') final = event.response;
  }
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.equal(types.at(-1), 'response.completed');
  assert.ok(types.indexOf('response.output_text.done') < types.indexOf('response.output_item.done'));
  assert.equal(text, 'Streamed words.');
  assert.equal(textOf(final), 'Streamed words.');
});

test('openai SDK: a function tool round trip through previous_response_id', async () => {
  for (const stream of [false, true]) {
    let first;
    if (stream) {
      const events = await client.responses.create({ model: 'fake-tools', input: callText, tools, stream: true });
      let args = '';
      for await (const e of events) {
        if (e.type === 'response.function_call_arguments.delta') args += e.delta;
        if (e.type === 'response.completed') first = e.response;
      }
      assert.deepEqual(JSON.parse(args), { city: 'Paris' });
    } else {
      first = await client.responses.create({ model: 'fake-tools', input: callText, tools });
    }
    assert.equal(textOf(first), 'Checking.');
    const call = first.output.find((i) => i.type === 'function_call');
    assert.ok(call, JSON.stringify(first.output));
    assert.equal(call.name, 'get_weather');
    assert.match(call.call_id, /^call_[A-Za-z0-9]{24}$/);
    assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
    const second = await client.responses.create({
      model: 'fake-tools',
      previous_response_id: first.id,
      tools,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '21 C and sunny' }],
    });
    assert.equal(second.previous_response_id, first.id);
    assert.equal(second.output_text, 'Tool said: 21 C and sunny');
  }
});

test('openai SDK: an unknown previous_response_id is a 404', async () => {
  await assert.rejects(
    client.responses.create({ model: 'fake-tools', input: 'x', previous_response_id: 'resp_nope' }),
    (e) => e instanceof OpenAI.NotFoundError && e.param === 'previous_response_id');
});

test('Vercel AI SDK: the default openai(model) provider, generateText and streamText', async () => {
  const openai = createOpenAI({ baseURL: address + '/v1', apiKey: 'unused' });
  const model = openai('fake-tools');  // the default provider speaks the Responses API
  const r = await generateText({ model, prompt: 'Vercel says hi.' });
  assert.equal(r.text, 'Vercel says hi.');
  assert.equal(r.finishReason, 'stop');
  assert.equal(r.usage.outputTokens, 'Vercel says hi.'.length);
  assert.match(r.response.id, /^resp_/);
  const s = streamText({ model, system: 'Be kind.', prompt: 'A streamed reply.' });
  let text = '';
  for await (const part of s.textStream) text += part;
  assert.equal(text, 'A streamed reply.');
  assert.equal(await s.finishReason, 'stop');
});

test('LangChain ChatOpenAI with useResponsesApi', async () => {
  const llm = new ChatOpenAI({
    model: 'fake-tools', apiKey: 'unused', useResponsesApi: true, maxRetries: 0,
    configuration: { baseURL: address + '/v1' },
  });
  const msg = await llm.invoke('LangChain answers.');
  assert.equal(msg.text ?? msg.content, 'LangChain answers.');
  assert.match(msg.response_metadata.id, /^resp_/);  // it went through /v1/responses
  assert.equal(msg.response_metadata.object, 'response');
  assert.equal(msg.usage_metadata.output_tokens, 'LangChain answers.'.length);
  let streamed = '';
  for await (const chunk of await llm.stream('Chunk by chunk.')) streamed += chunk.text ?? chunk.content;
  assert.equal(streamed, 'Chunk by chunk.');
});
