// Shared by the Node e2e tests that run the real `pagoda serve` (openai.test.mjs,
// structured.test.mjs): writes the random-weight test model (Phi-3's vocabulary), starts the
// server on a free port and stops it. Needs PAGODA_BINARY and PAGODA_TESTDATA_DIR (set by CTest).
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const binary = process.env.PAGODA_BINARY;
export const testdata = process.env.PAGODA_TESTDATA_DIR;

// Starts the server on a free port (--port 0) and reads the address from its JSON log.
export function startServer(args) {
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

// A scratch directory with the test model in it, and a server on that model with the given
// extra flags (--api-key apiKey, --served-model-name modelName). Returns { server, dir, stop }.
export async function startTestServer({ apiKey, modelName, extraArgs = [] }) {
  assert.ok(binary && testdata, 'PAGODA_BINARY and PAGODA_TESTDATA_DIR must be set');
  const dir = mkdtempSync(join(tmpdir(), 'pagoda-node-'));
  try {
    const model = join(dir, 'model.gguf');
    execFileSync(binary, ['make-model', '--output', model,
      '--vocab-from', join(testdata, 'vocab/ggml-vocab-phi-3.gguf'),
      '--layers', '2', '--dim', '64', '--ff', '128', '--heads', '4', '--kv-heads', '2',
      '--ctx', '512', '--quiet']);
    const server = await startServer(['--model', model, '--port', '0', '--host', '127.0.0.1',
      '--chat-template', join(testdata, 'chat-templates/templates/microsoft-Phi-3-mini-gguf.jinja'),
      '--threads', '1', '--ctx-size', '512', '--kv-cache-memory', '32MiB',
      '--api-key', apiKey, '--log-format', 'json', '--served-model-name', modelName, ...extraArgs]);
    return { server, dir };
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}

// Stops the server (SIGTERM; it must exit 0) and removes the scratch directory.
export async function stopTestServer({ server, dir } = {}) {
  try {
    if (server) {
      const exited = new Promise((r) => server.proc.on('exit', (code) => r(code)));
      server.proc.kill('SIGTERM');
      assert.equal(await exited, 0);
    }
  } finally {
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
}
