import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { runnerTargetOf } from '../shared/platform/config/targets';
import { issueLocalToken } from './auth/local-issuer';
import type { HostComponent, HostContext } from './host';

/** A runner agent the local host runs. */
export interface LocalAgent {
  readonly agent: string;
  readonly pid: number | undefined;
}

/**
 * The local host's runner agents (`RuntimeCloud__Local__Runners`, default 2): child processes of `runner/main.ts`
 * for the pool of the local cloud target, started once the host listens. Each gets only what an agent in a
 * customer's network would: the host's URL, its pool, a pool credential from the local issuer, and a working
 * directory outside the host's state dir; no store, Table or Service Bus setting and no host key. An agent that
 * exits is started again.
 */
export class LocalRunnerAgents implements HostComponent {
  readonly name = 'runner-agents';
  #context: HostContext | undefined;
  #workRoot: string | undefined;
  readonly #children = new Map<string, ChildProcess>();
  #stopping = false;

  async start(context: HostContext): Promise<void> {
    this.#context = context;
  }

  async listening(): Promise<void> {
    const context = this.#context;
    if (!context || context.config.iac.execution !== 'runner-jobs') return;
    const local = context.config.targets.find((t) => t.kind === 'local-cloud');
    if (!local || context.config.local.runners === 0) return;
    this.#workRoot = mkdtempSync(join(tmpdir(), 'rch-runners-'));
    const pool = runnerTargetOf(local).pool;
    const credential = await issueLocalToken(context.keys, {
      issuer: context.config.auth.issuer,
      audience: context.config.auth.audience,
      subject: `runner-agents:${pool}`,
      scopes: ['factory.runner.agent'],
      runnerPool: pool,
      ttlSeconds: 7 * 24 * 3600,
    });
    // Several local hosts may share a store (and so the pool's agent list): each names its agents after itself.
    const self = `${hostname().replace(/[^A-Za-z0-9-]/g, '-').slice(0, 100)}.${process.pid}`;
    for (let i = 1; i <= context.config.local.runners; i++) this.#spawn(`local-${i}.${self}`, pool, credential);
  }

  /** The agents running now. */
  agents(): LocalAgent[] {
    return [...this.#children].map(([agent, child]) => ({ agent, pid: child.pid }));
  }

  /** The agents stop before the host closes its HTTP server: their long-polled claims would hold it open. */
  async closing(): Promise<void> {
    await this.stop();
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    const exits = [...this.#children.values()].map(
      (child) =>
        new Promise<void>((done) => {
          if (child.exitCode !== null || child.signalCode !== null) return done();
          const kill = setTimeout(() => child.kill('SIGKILL'), 5000);
          child.once('exit', () => {
            clearTimeout(kill);
            done();
          });
          child.kill('SIGTERM');
        }),
    );
    await Promise.all(exits);
    this.#children.clear();
    if (this.#workRoot) rmSync(this.#workRoot, { recursive: true, force: true });
  }

  #spawn(agent: string, pool: string, credential: string): void {
    const context = this.#context;
    const workRoot = this.#workRoot;
    if (!context || !workRoot || this.#stopping) return;
    const child = spawn(process.execPath, ['--require', require.resolve('tsx/cjs'), resolve(__dirname, '../runner/main.ts')], {
      cwd: workRoot,
      // Nothing of the host's environment: an agent holds its pool credential and no store, bus or table setting.
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: workRoot,
        RuntimeCloud__Runner__HostUrl: context.baseUrl().toString(),
        RuntimeCloud__Runner__Pool: pool,
        RuntimeCloud__Runner__Credential: credential,
        RuntimeCloud__Runner__Agent: agent,
        RuntimeCloud__Runner__WorkDir: join(workRoot, agent),
        RuntimeCloud__Runner__Engine: 'local',
        ...(context.config.faults.agentCrashAt.length > 0
          ? { RuntimeCloud__Runner__CrashAt: context.config.faults.agentCrashAt.join(','), RuntimeCloud__Runner__CrashMarkers: context.config.faults.markers }
          : {}),
      },
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    });
    this.#children.set(agent, child);
    const log = (level: string) => (chunk: Buffer) => {
      for (const line of chunk.toString().split('\n').filter((l) => l.length > 0)) context.log(level, `runner ${agent}`, line);
    };
    child.stdout?.on('data', log('information'));
    child.stderr?.on('data', log('warning'));
    child.once('exit', () => {
      if (this.#children.get(agent) === child) this.#children.delete(agent);
      // An agent that died (killed, crashed) is replaced, as a pool's orchestrator replaces a lost worker.
      if (!this.#stopping) setTimeout(() => this.#spawn(agent, pool, credential), 500).unref();
    });
  }
}
