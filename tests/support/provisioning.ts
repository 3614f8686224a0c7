import * as fs from 'node:fs';
import { join } from 'node:path';
import { EXAMPLES_DIR, EXAMPLE_PROJECT_PATH, ensureExampleRepository, examplePromotion, type ExampleRepository } from '../../local/example-repository';
import type { PromotionApproved } from '../../shared/provisioning/promotion';

/**
 * The example desired state for provisioning tests: the example project, plus copies of its development and
 * production stack files under numbered names (`development-3`, `production-3`), so each test promotes to stacks of
 * its own in one shared database.
 */

/** The values behind the example's references; tests look for them in every stored and published byte. */
export const EXAMPLE_SECRETS = {
  development: 'dev-db-password-7f3a9c1e',
  production: 'prod-db-password-2b8e4d6a',
  featureFlags: '{"newCheckout":false,"flagToken":"flag-token-91c2aa"}',
} as const;

/** Writes `<stateDir>/references.json`, the local reference store the host resolves the example's references from. */
export function writeExampleReferences(stateDir: string): void {
  fs.mkdirSync(stateDir, { recursive: true });
  fs.writeFileSync(
    join(stateDir, 'references.json'),
    JSON.stringify({
      secrets: {
        'broker://runtime-cloud/app-db-password-development': EXAMPLE_SECRETS.development,
        'broker://runtime-cloud/app-db-password': EXAMPLE_SECRETS.production,
      },
      config: { 'platform://app/feature-flags': EXAMPLE_SECRETS.featureFlags },
    }),
  );
}

export interface ProvisioningExample {
  /** The example's files with the numbered stack copies; change them and call `commit()` for a new commit. */
  readonly source: string;
  repository: ExampleRepository;
  /** Commits the source as it is now (when it changed) and returns the repository at that commit. */
  commit(): Promise<ExampleRepository>;
}

/** The example in `<root>/source`, committed to the example repository in `stateDir`. */
export async function provisioningExample(root: string, stateDir: string, stackCopies = 20): Promise<ProvisioningExample> {
  const source = join(root, 'source');
  fs.cpSync(EXAMPLES_DIR, source, { recursive: true });
  const project = join(source, EXAMPLE_PROJECT_PATH);
  for (let i = 1; i <= stackCopies; i++) {
    for (const tier of ['development', 'production'] as const) {
      fs.copyFileSync(join(project, `Pulumi.${tier}.yaml`), join(project, `Pulumi.${tier}-${i}.yaml`));
    }
  }
  const example: ProvisioningExample = {
    source,
    repository: await ensureExampleRepository(stateDir, { source }),
    async commit() {
      example.repository = await ensureExampleRepository(stateDir, { source });
      return example.repository;
    },
  };
  return example;
}

/**
 * A promotion of the example (examplePromotion) to a tier, onto `stack` (default: the tier's own stack) and an
 * environment of its own unless told otherwise.
 */
export function aStackPromotion(
  repository: ExampleRepository,
  tier: 'development' | 'production',
  options: { stack?: string; environmentId?: string; overrides?: Partial<PromotionApproved> } = {},
): PromotionApproved {
  const base = examplePromotion(tier, repository);
  const stack = options.stack ?? tier;
  return {
    ...base,
    environment: { ...base.environment, id: options.environmentId ?? `env-${stack}` },
    desiredState: { ...base.desiredState, stack },
    ...options.overrides,
  };
}
