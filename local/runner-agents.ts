import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { agentPoolNamed, runnerTargetOf } from '../shared/platform/config/targets';
import { issueLocalToken } from './auth/local-issuer';
import type { HostComponent, HostContext } from './host';

/** A runner agent the local host runs. */
export interface LocalAgent {
  readonly pool: string;
  readonly agent: string;
  readonly pid: number | undefined;
}

/** How often the host looks for agent pools with queued jobs that it runs no agents for (dispatched by other hosts). */
const QUEUED_POOLS_LOOK_MS = 1000;
/**
 * The agent's process: from source through tsx as the host itself runs (the CLI), or the compiled agent beside a
 * compiled host (the tests' build, tests/support/host-build.ts).
 */
const AGENT_ARGS = __filename.endsWith('.ts') ? ['--require', require.resolve('tsx/cjs'), resolve(__dirname, 'runner-agent.ts')] : [resolve(__dirname, 'runner-agent.js')];

/**
 * The local host's runner agents: child processes of `local/runner-agent.ts` (the runner with the local engine), `RuntimeCloud__Local__Runners` (default 2) per
 * agent pool of a local cloud target. The host cannot know the tenants in advance, so it starts a pool's agents on
 * its first queued job: at once for a job this host dispatches, within `QUEUED_POOLS_LOOK_MS` for one another host
 * sharing the store dispatched. Each agent gets only what an agent in a customer's network would: the host's URL,
 * its pool, that pool's credential from the local issuer, and a working directory outside the host's state dir; no
 * store, Table or Service Bus setting and no host key. An agent that exits is started again.
 */
export class LocalRunnerAgents implements HostComponent {
  readonly name = 'runner-agents';
  #context: HostContext | undefined;
  #workRoot: string | undefined;
  /** By pool, then agent id. */
  readonly #children = new Map<string, Map<string, ChildProcess>>();
  #stopping = false;
  #unwatch: (() => void) | undefined;
  #look: NodeJS.Timeout | undefined;
  /** Agents are named after this host (its name and process): local hosts sharing a store share the pools' agent lists. */
  readonly #self = `${hostname().replace(/[^A-Za-z0-9-]/g, '-').slice(0, 100)}.${process.pid}`;

  async start(context: HostContext): Promise<void> {
    this.#context = context;
  }

  async listening(): Promise<void> {
    const context = this.#context;
    if (!context || context.config.iac.execution !== 'runner-jobs' || context.config.local.agents === 0) return;
    const local = new Set(context.config.targets.filter((t) => t.kind === 'local-cloud').map((t) => t.id));
    if (local.size === 0) return;
    this.#workRoot = mkdtempSync(join(tmpdir(), 'rch-runners-'));
    const runners = context.config.targets.map(runnerTargetOf);
    const start = (pool: string) => {
      const served = agentPoolNamed(runners, pool);
      if (served && local.has(served.runner.target)) void this.#startPool(pool);
    };
    this.#unwatch = context.deps.provisioning.runners.watchDispatches(start);
    const look = async () => {
      try {
        for (const pool of await context.deps.provisioning.runners.pools()) if (pool.jobsWaiting > 0) start(pool.pool);
      } catch (error) {
        // The store busy or away: the next look asks again.
        context.log('debug', 'runner-agents', `could not look for queued pools: ${error instanceof Error ? error.message : String(error)}`);
      }
      if (!this.#stopping) this.#look = setTimeout(() => void look(), QUEUED_POOLS_LOOK_MS).unref();
    };
    await look();
  }

  /** The agents running now. */
  agents(): LocalAgent[] {
    return [...this.#children].flatMap(([pool, children]) => [...children].map(([agent, child]) => ({ pool, agent, pid: child.pid })));
  }

  /** Starts the pool's agents, each with the pool's own credential, unless this host runs them already. */
  async #startPool(pool: string): Promise<void> {
    const context = this.#context;
    if (!context || this.#stopping || this.#children.has(pool)) return;
    this.#children.set(pool, new Map());
    const credential = await issueLocalToken(context.keys, {
      issuer: context.config.auth.issuer,
      audience: context.config.auth.audience,
      subject: `runner-agents:${pool}`,
      scopes: ['factory.runner.agent'],
      runnerPool: pool,
      ttlSeconds: 7 * 24 * 3600,
    });
    for (let i = 1; i <= context.config.local.agents; i++) this.#spawn(`local-${i}.${this.#self}`, pool, credential);
  }

  /** The agents stop before the host closes its HTTP server: their long-polled claims would hold it open. */
  async closing(): Promise<void> {
    await this.stop();
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    this.#unwatch?.();
    clearTimeout(this.#look);
    const exits = [...this.#children.values()].flatMap((children) => [...children.values()]).map(
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
    const child = spawn(process.execPath, AGENT_ARGS, {
      cwd: workRoot,
      // Nothing of the host's environment: an agent holds its pool credential and no store, bus or table setting.
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: workRoot,
        RuntimeCloud__Runner__HostUrl: context.baseUrl().toString(),
        RuntimeCloud__Runner__Pool: pool,
        RuntimeCloud__Runner__Credential: credential,
        RuntimeCloud__Runner__Agent: agent,
        RuntimeCloud__Runner__WorkDir: join(workRoot, pool, agent),
        RuntimeCloud__Runner__Engine: 'local',
        // Long-lived: the host wakes their long-polled claims itself (no wake-up reaches an agent here: the embedded
        // topic has no subscription per pool), and it would start an agent that idled out again at once.
        RuntimeCloud__Runner__IdleSeconds: '0',
        ...(context.config.faults.agentCrashAt.length > 0
          ? { RuntimeCloud__Runner__CrashAt: context.config.faults.agentCrashAt.join(','), RuntimeCloud__Runner__CrashMarkers: context.config.faults.markers }
          : {}),
      },
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    });
    const children = this.#children.get(pool);
    children?.set(agent, child);
    const log = (level: string) => (chunk: Buffer) => {
      for (const line of chunk.toString().split('\n').filter((l) => l.length > 0)) context.log(level, `runner ${pool} ${agent}`, line);
    };
    child.stdout?.on('data', log('information'));
    child.stderr?.on('data', log('warning'));
    child.once('exit', () => {
      if (children?.get(agent) === child) children.delete(agent);
      // An agent that died (killed, crashed) is replaced, as a pool's orchestrator replaces a lost worker.
      if (!this.#stopping) setTimeout(() => this.#spawn(agent, pool, credential), 500).unref();
    });
  }
}
