// The official `openai` Node SDK picking LoRA adapters by model name on `pagoda serve`: the
// listing shows each adapter with its parent, a completion and a chat completion under an
// adapter equal the merged model's (a second server on the file make-model merged), an unknown
// adapter is the SDK's NotFoundError, and adapters loaded at run time are served by name.
// Needs PAGODA_BINARY (set by CTest); run `npm ci` here first.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { binary, startServer } from './server.mjs';

const apiKey = 'node-lora-key';
let dir;
let adapted;
let merged;

function makeFiles() {
  const base = join(dir, 'base.gguf');
  execFileSync(binary, ['make-model', '--output', base, '--layers', '2', '--dim', '64', '--ff', '128',
    '--heads', '4', '--kv-heads', '2', '--ctx', '512', '--type', 'f32', '--seed', '3', '--quiet']);
  for (const [name, seed, mergedOut] of [['a', '1', 'merged-a.gguf'], ['b', '2', null]]) {
    const args = ['make-model', '--lora-for', base, '--output', join(dir, `${name}.gguf`),
      '--lora-rank', '8', '--seed', seed, '--lora-targets', 'q,k,v,o,gate,up,down,output', '--quiet'];
    if (mergedOut) args.push('--merged-output', join(dir, mergedOut));
    execFileSync(binary, args);
  }
  return base;
}

function serverArgs(model, extra) {
  return ['--model', model, '--port', '0', '--host', '127.0.0.1', '--threads', '1', '--ctx-size', '512',
    '--kv-cache-memory', '16MiB', '--api-key', apiKey, '--log-format', 'json', '--served-model-name', 'base',
    ...extra];
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pagoda-node-lora-'));
  const base = makeFiles();
  adapted = await startServer(serverArgs(base, ['--lora', `style-a=${join(dir, 'a.gguf')}`,
    '--allow-runtime-lora', 'on']));
  merged = await startServer(serverArgs(join(dir, 'merged-a.gguf'), []));
});

after(async () => {
  for (const s of [adapted, merged]) {
    if (!s) continue;
    const exited = new Promise((r) => s.proc.on('exit', r));
    s.proc.kill('SIGTERM');
    await exited;
  }
  rmSync(dir, { recursive: true, force: true });
});

const client = (s) => new OpenAI({ apiKey, baseURL: s.address + '/v1', maxRetries: 0 });

test('models.list shows the adapter with its parent', async () => {
  const page = await client(adapted).models.list();
  const ids = page.data.map((m) => m.id);
  assert.deepEqual(ids, ['base', 'style-a']);
  assert.equal(page.data[1].parent, 'base');
  const m = await client(adapted).models.retrieve('style-a');
  assert.equal(m.parent, 'base');
});

test('a completion under the adapter equals the merged model', async () => {
  const params = { prompt: 'The quick brown fox', max_tokens: 16, temperature: 0 };
  const got = await client(adapted).completions.create({ model: 'style-a', ...params });
  const want = await client(merged).completions.create({ model: 'base', ...params });
  const plain = await client(adapted).completions.create({ model: 'base', ...params });
  assert.equal(got.model, 'style-a');
  assert.equal(got.choices[0].text, want.choices[0].text);
  assert.notEqual(got.choices[0].text, plain.choices[0].text);
});

test('a chat completion under the adapter equals the merged model', async () => {
  const params = { messages: [{ role: 'user', content: 'Hello' }], max_tokens: 12, temperature: 0 };
  const got = await client(adapted).chat.completions.create({ model: 'style-a', ...params });
  const want = await client(merged).chat.completions.create({ model: 'base', ...params });
  assert.equal(got.choices[0].message.content, want.choices[0].message.content);
});

test('unknown adapters are NotFoundError; runtime loads are served by name', async () => {
  const c = client(adapted);
  await assert.rejects(c.completions.create({ model: 'style-b', prompt: 'x', max_tokens: 1 }),
    (e) => e instanceof OpenAI.NotFoundError);
  // The admin routes are not in the SDK: plain fetch, with the same key.
  const admin = (path, body) => fetch(adapted.address + '/v1/' + path, {
    method: 'POST', headers: { Authorization: `Bearer ${apiKey}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const load = await admin('load_lora_adapter', { lora_name: 'style-b', lora_path: join(dir, 'b.gguf') });
  assert.equal(await load.text(), "Success: LoRA adapter 'style-b' added successfully.");
  const r = await c.completions.create({ model: 'style-b', prompt: 'x', max_tokens: 4, temperature: 0 });
  assert.equal(r.model, 'style-b');
  const unload = await admin('unload_lora_adapter', { lora_name: 'style-b' });
  assert.equal(unload.status, 200);
  await assert.rejects(c.completions.create({ model: 'style-b', prompt: 'x', max_tokens: 1 }),
    (e) => e instanceof OpenAI.NotFoundError);
});
