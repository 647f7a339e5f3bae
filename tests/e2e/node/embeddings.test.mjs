// /v1/embeddings through the clients people use: the OpenAI Node SDK (`embeddings.create`, which
// asks for base64 by default and decodes it), the Vercel AI SDK's `embed` / `embedMany` with
// @ai-sdk/openai's embedding model, and LangChain JS's `OpenAIEmbeddings`. Each result is checked
// against the floats of a plain HTTP request for the same text. The model is a random-weight one
// with pagoda's own byte vocabulary, so no ../shared data is needed; the server is started with
// the vLLM-style spelling (positional model, --max-model-len) and two served names.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { embed, embedMany } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { OpenAIEmbeddings } from '@langchain/openai';
import { binary, startServer, stopTestServer } from './server.mjs';

const apiKey = 'embed-key';
const model = 'pagoda-embed';
const text = 'The quick brown fox jumps over the lazy dog';
let running;
let baseURL;

before(async () => {
  assert.ok(binary, 'PAGODA_BINARY must be set');
  const dir = mkdtempSync(join(tmpdir(), 'pagoda-node-embed-'));
  running = { dir };
  const file = join(dir, 'model.gguf');
  execFileSync(binary, ['make-model', '--output', file, '--layers', '2', '--dim', '64', '--ff', '128',
    '--heads', '4', '--kv-heads', '2', '--ctx', '256', '--seed', '9', '--quiet']);
  running.server = await startServer([file, '--port', '0', '--host', '127.0.0.1', '-t', '1',
    '--max-model-len', '256', '--kv-cache-memory', '16MiB', '--api-key', apiKey, '--log-format', 'json',
    '--served-model-name', `${model},text-embedding-3-small`]);
  baseURL = running.server.address + '/v1';
});

after(async () => { await stopTestServer(running); });

// The vector for `input` as plain JSON floats (encoding_format float).
async function plainFloats(input) {
  const res = await fetch(baseURL + '/embeddings', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ model, input, encoding_format: 'float' }),
  });
  assert.equal(res.status, 200);
  return (await res.json()).data.map((d) => d.embedding);
}

function assertClose(got, want) {
  assert.equal(got.length, want.length);
  for (let i = 0; i < want.length; i++) assert.ok(Math.abs(got[i] - want[i]) <= 1e-6, `component ${i}: ${got[i]} vs ${want[i]}`);
  const norm = Math.sqrt(got.reduce((s, x) => s + x * x, 0));
  assert.ok(Math.abs(norm - 1) < 1e-5, `norm ${norm}`);
}

test('OpenAI SDK embeddings.create (base64 by default) and with dimensions', async () => {
  const [want] = await plainFloats(text);
  assert.equal(want.length, 64);
  const client = new OpenAI({ baseURL, apiKey });
  const res = await client.embeddings.create({ model, input: [text, 'another input'] });
  assert.equal(res.object, 'list');
  assert.equal(res.model, model);
  assert.equal(res.data.length, 2);
  assert.deepEqual(res.data.map((d) => d.index), [0, 1]);
  assertClose(res.data[0].embedding, want);
  assert.notDeepEqual(res.data[1].embedding, res.data[0].embedding);
  assert.ok(res.usage.prompt_tokens > text.length);  // a byte vocabulary: a token per byte, and BOS
  assert.equal(res.usage.total_tokens, res.usage.prompt_tokens);

  const short = await client.embeddings.create({ model, input: text, dimensions: 8, encoding_format: 'float' });
  assert.equal(short.data[0].embedding.length, 8);
  const head = Math.hypot(...want.slice(0, 8));
  assertClose(short.data[0].embedding, want.slice(0, 8).map((x) => x / head));

  // An alias answers under its own name; a model that is not served is a 404.
  const alias = await client.embeddings.create({ model: 'text-embedding-3-small', input: text });
  assert.equal(alias.model, 'text-embedding-3-small');
  assertClose(alias.data[0].embedding, want);
  await assert.rejects(client.embeddings.create({ model: 'gpt-4o', input: text }),
    (e) => e.status === 404 && e.code === 'model_not_found');
});

test('Vercel AI SDK embed and embedMany with @ai-sdk/openai', async () => {
  const [want, want2] = await plainFloats([text, 'second value']);
  const openai = createOpenAI({ baseURL, apiKey });
  const { embedding, usage } = await embed({ model: openai.embedding(model), value: text });
  assertClose(embedding, want);
  assert.ok(usage.tokens > text.length);
  const many = await embedMany({ model: openai.embedding(model), values: [text, 'second value'] });
  assert.equal(many.embeddings.length, 2);
  assertClose(many.embeddings[0], want);
  assertClose(many.embeddings[1], want2);
});

test('LangChain JS OpenAIEmbeddings embedQuery and embedDocuments', async () => {
  const [want, want2] = await plainFloats([text, 'a document']);
  const embeddings = new OpenAIEmbeddings({ model, apiKey, configuration: { baseURL } });
  assertClose(await embeddings.embedQuery(text), want);
  const docs = await embeddings.embedDocuments([text, 'a document']);
  assert.equal(docs.length, 2);
  assertClose(docs[0], want);
  assertClose(docs[1], want2);
});
