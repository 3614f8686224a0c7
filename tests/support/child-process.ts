import { spawn, type ChildProcess } from 'node:child_process';
import { join, resolve } from 'node:path';
import { assertHostStoreMatchesContract } from './event-contracts';

/** The `runtime-cloud` command as package.json `bin` installs it: the sources, run through tsx. */
export const CLI = join(__dirname, '../../bin/runtime-cloud.js');

/**
 * What the child processes run: the test run's compiled host (built once by global-setup.ts, host-build.ts), else
 * (a bench, a script) the installed command. tests/e2e/runtime-cloud-start.test.ts runs the installed command itself.
 */
const HOST_CLI = process.env.RUNTIME_CLOUD_TEST_HOST_CLI ?? CLI;

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
 * node itself (`--cpu-prof`, which NODE_OPTIONS may not carry); `cli` the command's script (the compiled host).
 */
export async function startChildHost(
  stateDir: string,
  env: Record<string, string> = {},
  timeoutMs = 60_000,
  args: readonly string[] = [],
  nodeArgs: readonly string[] = [],
  cli = HOST_CLI,
): Promise<RunningChild> {
  const { child, output, exited, match } = await spawnCli([...nodeArgs, cli, 'start', '--port', '0', '--state-dir', stateDir, ...args], env, /listening on (http:\/\/\S+)/, 'host', timeoutMs);
  const url = new URL(match);
  return {
    child,
    url,
    output,
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

/** Runs the CLI (`cli`: the compiled host's) to completion and returns its exit code and output. */
export function runCli(args: string[], env: Record<string, string> = {}, cli = HOST_CLI): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [cli, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
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
  output(): string;
  stop(): Promise<number | null>;
}

/**
 * Starts `runtime-cloud peers` (local/peers.ts) in a child process and waits for the settings it prints. `env` names
 * the store the stand-ins answer from, which the hosts started with `settings` must share.
 */
export async function startPeersProcess(stateDir: string, env: Record<string, string> = {}, timeoutMs = 60_000): Promise<RunningPeers> {
  const { child, output, exited, match } = await spawnCli([HOST_CLI, 'peers', '--state-dir', stateDir], env, /^peers (\{.*\})$/m, 'the peers', timeoutMs);
  const settings = JSON.parse(match) as Record<string, string>;
  return {
    child,
    settings,
    output,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
}

/**
 * Spawns node with `args` and waits until its output matches `ready` (its first group is `match`); rejects when it
 * exits first or `timeoutMs` passes, with what it printed. A child that did not start in time is killed: left running,
 * its pipes would keep the caller's process alive after the error (a bench that never ends instead of failing).
 */
async function spawnCli(
  args: readonly string[],
  env: Record<string, string>,
  ready: RegExp,
  what: string,
  timeoutMs: number,
): Promise<{ child: ChildProcess; output: () => string; exited: Promise<number | null>; match: string }> {
  const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const match = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${what} did not start in ${timeoutMs} ms:\n${output}`));
    }, timeoutMs);
    child.stdout.on('data', () => {
      const found = ready.exec(output)?.[1];
      if (found) {
        clearTimeout(timer);
        resolve(found);
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited with ${code} before it was ready:\n${output}`));
    });
  });
  return { child, output: () => output, exited, match };
}
