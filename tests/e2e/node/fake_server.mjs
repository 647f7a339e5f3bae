// Shared by the Node tests that drive `fake_tool_server` (tests/e2e): pagoda's HTTP layer over a
// fake engine whose "model" answers with the text of the last user message (or "Tool said: "
// and the tool results that end the conversation). Needs PAGODA_FAKE_TOOL_SERVER (set by CTest).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';

export const fakeServerBinary = process.env.PAGODA_FAKE_TOOL_SERVER;
const running = [];

// Starts one with the given tool-call parser (and `extra` flags, such as ['--api-key', KEY]);
// resolves to its base address (http://127.0.0.1:PORT).
export function startFakeServer(parser = 'hermes', extra = []) {
  assert.ok(fakeServerBinary, 'PAGODA_FAKE_TOOL_SERVER must be set');
  return new Promise((resolve, reject) => {
    const proc = spawn(fakeServerBinary, ['--tool-call-parser', parser, ...extra], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    const timer = setTimeout(() => reject(new Error('server did not start:\n' + out)), 30000);
    proc.stdout.on('data', (chunk) => {
      out += chunk.toString();
      for (const line of out.split('\n')) {
        if (!line.startsWith('{')) continue;
        const j = JSON.parse(line);
        if (j.msg === 'pagoda serving') {
          clearTimeout(timer);
          running.push(proc);
          resolve(j.address);
          return;
        }
      }
    });
    proc.stderr.on('data', (c) => { out += c.toString(); });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}:\n${out}`)); });
  });
}

// Stops every server started here (they stop when their stdin closes); each must exit 0.
export async function stopFakeServers() {
  for (const proc of running.splice(0)) {
    const exited = new Promise((r) => proc.on('exit', (code) => r(code)));
    proc.stdin.end();
    assert.equal(await exited, 0);
  }
}
