import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export interface ChildHost {
  readonly url: URL;
  readonly process: ChildProcess;
  /** SIGKILL, and wait until the process is gone. */
  kill(): Promise<void>;
}

const ENTRY = join(__dirname, 'durable-child-host.ts');

/**
 * Starts tests/support/durable-child-host.ts from source (`node --require tsx/cjs --import tsx/esm`) on the given store settings and
 * resolves once it listens. Every child started here must be killed by the test (afterAll).
 */
export async function startChildHost(options: {
  settings: Readonly<Record<string, string>>;
  leaseMs?: number;
  workerId?: string;
}): Promise<ChildHost> {
  const stateDir = mkdtempSync(join(tmpdir(), 'rch-durable-child-'));
  const args = ['--require', 'tsx/cjs', '--import', 'tsx/esm', ENTRY, '--state-dir', stateDir, '--settings', JSON.stringify(options.settings)];
  if (options.leaseMs !== undefined) args.push('--lease-ms', String(options.leaseMs));
  if (options.workerId !== undefined) args.push('--worker-id', options.workerId);
  const child = spawn(process.execPath, args, { cwd: join(__dirname, '..', '..'), stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const cleanup = () => rmSync(stateDir, { recursive: true, force: true });
  const kill = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
    cleanup();
  };
  const url = await new Promise<URL>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    lines.on('line', (line) => {
      try {
        const parsed = JSON.parse(line) as { url?: string };
        if (parsed.url) resolve(new URL(parsed.url));
      } catch {
        // Not the readiness line.
      }
    });
    child.once('exit', (code) => reject(new Error(`child host exited (${String(code)}) before listening: ${stderr}`)));
  }).catch(async (error: unknown) => {
    await kill();
    throw error;
  });
  return { url, process: child, kill };
}
