import { join } from 'node:path';
import type { ConfigMap, EngineEvent, PreviewResult, UpdateSummary, UpResult } from '@pulumi/pulumi/automation';
import { AppError, ensureError } from '../errors/app-error';

/**
 * The part of the Pulumi Automation API (`@pulumi/pulumi/automation`) the `pulumi` runner uses, as a port: the
 * runner (pulumi-runner.ts) drives a stack through it, `pulumiAutomationApi` below binds it to the real
 * `LocalWorkspace`, and tests drive the runner with a test double that replays recorded engine events.
 *
 * Failures come out of the port as two kinds only: `PROVISIONING.RUNNER_UNAVAILABLE` (an AppError, kind
 * `unavailable`: the `pulumi` CLI, which every workspace call runs, is missing or cannot be started) and
 * `PulumiCommandFailure` (the CLI ran and exited non-zero). `translateAutomationError` makes them from what the
 * Automation API throws.
 */

/** A stack of a workspace over a project directory: the calls the runner makes (a subset of `Stack`). */
export interface PulumiStackHandle {
  /** `Stack.setAllConfig`: the runner sets only references, as secrets. */
  setAllConfig(config: ConfigMap): Promise<void>;
  /** `Stack.info(showSecrets)`: the last update, or undefined for a stack never updated. */
  info(showSecrets?: boolean): Promise<UpdateSummary | undefined>;
  /** `Stack.preview({ plan, refresh })`: `pulumi preview --save-plan <plan> [--refresh]`. */
  preview(options: { plan: string; onEvent: (event: EngineEvent) => void; refresh?: boolean }): Promise<PreviewResult>;
  /**
   * `Stack.up({ plan })`: `pulumi up --plan <plan>`, which refuses any operation beyond the plan; `showSecrets:
   * false` keeps the summary it reads afterwards free of secret config; aborting `signal` cancels the update;
   * `refresh` reads each resource from its provider first (`--refresh`).
   */
  up(options: { plan: string; onEvent: (event: EngineEvent) => void; showSecrets: false; signal: AbortSignal; refresh?: boolean }): Promise<UpResult>;
}

export interface PulumiAutomation {
  /** `LocalWorkspace.createOrSelectStack({ stackName, workDir })`. */
  selectStack(args: { readonly stackName: string; readonly workDir: string }): Promise<PulumiStackHandle>;
}

/** The CLI ran and failed. `stderr` is kept for classification only: it never goes into a receipt as is. */
export class PulumiCommandFailure extends Error {
  constructor(
    /** `concurrent-update`: another update holds the stack. */
    readonly reason: 'failed' | 'concurrent-update',
    readonly exitCode: number | undefined,
    readonly stderr: string,
  ) {
    super(`pulumi exited with ${exitCode ?? 'an error'}${reason === 'concurrent-update' ? ': another update holds the stack' : ''}`);
    this.name = 'PulumiCommandFailure';
  }
}

export function runnerUnavailable(message = 'the pulumi CLI is not installed on this host'): AppError {
  return new AppError('PROVISIONING.RUNNER_UNAVAILABLE', 'unavailable', message);
}

interface CommandResultLike {
  readonly stderr?: unknown;
  readonly code?: unknown;
  readonly err?: { readonly code?: unknown } | undefined;
}

/**
 * What an Automation API call threw, as the port's failures: a `CommandError` (its `commandResult`) whose process
 * could not be started (ENOENT, EACCES) → `PROVISIONING.RUNNER_UNAVAILABLE`; a `ConcurrentUpdateError` →
 * `PulumiCommandFailure('concurrent-update')`; any other `CommandError` → `PulumiCommandFailure('failed')`;
 * anything else as it is.
 */
export function translateAutomationError(thrown: unknown): Error {
  const error = ensureError(thrown);
  if (error instanceof AppError || error instanceof PulumiCommandFailure) return error;
  const result = (error as { commandResult?: CommandResultLike }).commandResult;
  if (!result) return error;
  const spawnCode = result.err?.code;
  if (spawnCode === 'ENOENT' || spawnCode === 'EACCES' || /Command failed with (ENOENT|EACCES)/.test(error.message)) {
    return runnerUnavailable();
  }
  const stderr = typeof result.stderr === 'string' ? result.stderr : '';
  const exitCode = typeof result.code === 'number' ? result.code : undefined;
  return new PulumiCommandFailure(error.name === 'ConcurrentUpdateError' ? 'concurrent-update' : 'failed', exitCode, stderr);
}

async function translating<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (thrown) {
    throw translateAutomationError(thrown);
  }
}

export interface PulumiAutomationOptions {
  /** Where the CLI is installed (`<cliRoot>/bin/pulumi`); default: `pulumi` on PATH. */
  readonly cliRoot?: string;
  /** Environment for the CLI over the process's own (backend, secrets provider passphrase, ...). */
  readonly envVars?: Readonly<Record<string, string>>;
  readonly pulumiHome?: string;
  /**
   * The secrets provider a stack is created with (`pulumi stack init --secrets-provider`): a tenant's Azure Key
   * Vault key in production. Example: `azurekeyvault://kv-demo-team.vault.azure.net/keys/pulumi`.
   */
  readonly secretsProvider?: string;
}

/**
 * The environment of the CLI a workspace runs: `envVars`, and never a plugin download, whatever they say. A plugin
 * comes from the runner image only (infra/runner/Dockerfile, which sets the same); a program that names another is
 * refused by the host's package policy before any job, and here the CLI fails rather than fetch it.
 */
export function workspaceEnv(envVars: Readonly<Record<string, string>> = {}): Record<string, string> {
  return { ...envVars, PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION: 'true' };
}

/**
 * The real Automation API: `LocalWorkspace` over `workDir`, every call running the `pulumi` CLI. The module is
 * loaded on first use, so a host on the local runner never loads it.
 */
export function pulumiAutomationApi(options: PulumiAutomationOptions = {}): PulumiAutomation {
  return {
    async selectStack({ stackName, workDir }) {
      // A CommonJS package with directory subpaths: `require`, which also keeps it off hosts that never use it.
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const automation = require('@pulumi/pulumi/automation') as typeof import('@pulumi/pulumi/automation');
      const stack = await translating(async () => {
        const pulumiCommand = options.cliRoot ? await automation.PulumiCommand.get({ root: options.cliRoot }) : undefined;
        return automation.LocalWorkspace.createOrSelectStack(
          { stackName, workDir },
          { ...(pulumiCommand ? { pulumiCommand } : {}), envVars: workspaceEnv(options.envVars), ...(options.pulumiHome ? { pulumiHome: options.pulumiHome } : {}), ...(options.secretsProvider ? { secretsProvider: options.secretsProvider } : {}) },
        );
      });
      return {
        setAllConfig: (config) => translating(() => stack.setAllConfig(config)),
        info: (showSecrets) => translating(() => stack.info(showSecrets)),
        preview: (opts) => translating(() => stack.preview(opts)),
        up: (opts) => translating(() => stack.up(opts)),
      };
    },
  };
}

/** The CLI path `version()` runs: `<cliRoot>/bin/pulumi`, or `pulumi` on PATH. */
export function pulumiCliPath(cliRoot?: string): string {
  return cliRoot ? join(cliRoot, 'bin', 'pulumi') : 'pulumi';
}
