import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

/**
 * The IaC runner port. `version()` answers for health and target metadata; `preview` and `apply` join it when
 * provisioning runs are built.
 */
export interface IacRunner {
  readonly name: 'local' | 'pulumi';
  version(): Promise<string>;
}

/** Version of the embedded engine that evaluates Pulumi YAML projects against the local cloud. */
export const LOCAL_ENGINE_VERSION = 'runtime-cloud-local-iac 0.1.0';

export function localIacRunner(): IacRunner {
  return { name: 'local', version: () => Promise.resolve(LOCAL_ENGINE_VERSION) };
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
