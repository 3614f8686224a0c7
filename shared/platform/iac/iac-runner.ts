import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { createLocalEngine, type ConfigOverrides, type LocalEngineOptions } from './local-engine';
import type { ApplyResult, Plan, ResolveReferences } from './plan';
import type { ProjectFiles } from './pulumi-yaml';

export type { ConfigOverrides, LocalEngineOptions };

/** The IaC runner port, as far as health and target metadata need it. */
export interface IacRunner {
  readonly name: 'local' | 'pulumi';
  version(): Promise<string>;
}

/**
 * The IaC runner port of ARCHITECTURE.md: a runner that plans and applies.
 *
 * - `preview` plans the project in `files` (`Pulumi.yaml`, `Pulumi.<stack>.yaml`) with `config` over the stack
 *   file's values, against the stack's current state. Plan errors are AppErrors with `IAC.*` codes.
 * - `apply` re-plans against the current state and carries the plan out only if its digest is the approved one
 *   (else `PROVISIONING.PLAN_CHANGED`, nothing applied). References are resolved here, through
 *   `resolveReferences`, and nowhere else. Expected failures (plan changed, target unreachable, a step refused)
 *   are a result with status `failed` and each resource's status; a store fault is thrown.
 */
export interface IacEngine extends IacRunner {
  preview(stack: string, files: ProjectFiles, config?: ConfigOverrides): Promise<Plan>;
  apply(stack: string, files: ProjectFiles, config: ConfigOverrides, approvedPlan: Plan, resolveReferences: ResolveReferences): Promise<ApplyResult>;
}

/** The embedded runner: the local engine, whose `version()` also checks that its state store answers. */
export function localIacRunner(options: LocalEngineOptions): IacEngine {
  return createLocalEngine(options);
}

/** The Pulumi Automation API needs the `pulumi` CLI on PATH; its version is what `pulumi version` prints. */
export function pulumiIacRunner(): IacRunner {
  const run = promisify(execFile);
  return {
    name: 'pulumi',
    async version() {
      try {
        const { stdout } = await run('pulumi', ['version'], { timeout: 10_000 });
        return `pulumi ${stdout.trim()}`;
      } catch (error) {
        const code = (error as { code?: unknown }).code;
        throw new Error(code === 'ENOENT' ? 'the pulumi CLI is not installed on this host' : 'pulumi version failed');
      }
    },
  };
}
