import { spawn, type ChildProcess } from 'node:child_process';
import { join, resolve } from 'node:path';
import { assertHostStoreMatchesContract } from './event-contracts';

/** The `runtime-cloud` command as package.json `bin` installs it. */
export const CLI = join(__dirname, '../../bin/runtime-cloud.js');

export interface RunningChild {
  readonly child: ChildProcess;
  readonly url: URL;
  output(): string;
  /**
   * Sends a signal and resolves with the exit code. Then every event in the outbox of the child's own SQLite store
   * (in its state dir) is checked against asyncapi.json; it rejects when one breaks it. A store given by `env` (a
   * test database) is checked when that database is dropped.
   */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/**
 * Starts `runtime-cloud start --port 0` in a child process and waits for "listening on <origin>".
 * `env` adds settings (for example a shared PostgreSQL store); `args` more flags (`--app DIR`); `nodeArgs` flags of
 * node itself (`--cpu-prof`, which NODE_OPTIONS may not carry).
 */
export async function startChildHost(
  stateDir: string,
  env: Record<string, string> = {},
  timeoutMs = 60_000,
  args: readonly string[] = [],
  nodeArgs: readonly string[] = [],
): Promise<RunningChild> {
  const child = spawn(process.execPath, [...nodeArgs, CLI, 'start', '--port', '0', '--state-dir', stateDir, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = await new Promise<URL>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`host did not start in ${timeoutMs} ms:\n${output}`)), timeoutMs);
    const check = () => {
      const match = /listening on (http:\/\/\S+)/.exec(output);
      if (match?.[1]) {
        clearTimeout(timer);
        resolve(new URL(match[1]));
      }
    };
    child.stdout.on('data', check);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`host exited with ${code} before listening:\n${output}`));
    });
  });
  return {
    child,
    url,
    output: () => output,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const code = await exited;
      const store = {
        dialect: env.RuntimeCloud__Store__Dialect ?? process.env.RuntimeCloud__Store__Dialect ?? 'sqlite',
        connection: env.RuntimeCloud__Store__Connection ?? process.env.RuntimeCloud__Store__Connection ?? 'runtime-cloud.sqlite',
      };
      await assertHostStoreMatchesContract(store, resolve(stateDir), 'the child host');
      return code;
    },
  };
}

/** Runs the CLI to completion and returns its exit code and output. */
export function runCli(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

export interface RunningPeers {
  readonly child: ChildProcess;
  /** The settings that point hosts at the peers (Azurite, the external services' stand-ins). */
  readonly settings: Readonly<Record<string, string>>;
  stop(): Promise<number | null>;
}

/**
 * Starts `runtime-cloud peers` (local/peers.ts) in a child process and waits for the settings it prints. `env` names
 * the store the stand-ins answer from, which the hosts started with `settings` must share.
 */
export async function startPeersProcess(stateDir: string, env: Record<string, string> = {}, timeoutMs = 60_000): Promise<RunningPeers> {
  const child = spawn(process.execPath, [CLI, 'peers', '--state-dir', stateDir], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const settings = await new Promise<Record<string, string>>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the peers did not start in ${timeoutMs} ms:\n${output}`)), timeoutMs);
    child.stdout.on('data', () => {
      const line = /^peers (\{.*\})$/m.exec(output);
      if (line?.[1]) {
        clearTimeout(timer);
        resolve(JSON.parse(line[1]) as Record<string, string>);
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`the peers exited with ${code} before they were ready:\n${output}`));
    });
  });
  return {
    child,
    settings,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
}
