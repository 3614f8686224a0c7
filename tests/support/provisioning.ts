import * as fs from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { EXAMPLES_DIR, EXAMPLE_PROJECT_PATH, ensureExampleRepository, examplePromotion, type ExampleRepository } from '../../local/example-repository';
import { LOCAL_PACKAGES } from '../../local/local-packages';
import { settings } from '../../shared/platform/config/config';
import type { CloudEvent } from '../../shared/platform/bus/events';
import type { LocalCloud } from '../../local/cloud/local-cloud';
import { qualifiedStackName, type StackRef } from '../../shared/platform/iac/stack-ref';
import { localIacRunner } from '../../local/engine/local-engine';
import type { SqlStore } from '../../shared/platform/sql/database';
import { randomIds, type Clock } from '../../shared/platform/time/clock';
import { createLocalExternalServices } from '../../local/external-services/local-external-services.adapter';
import type { PromotionApproved } from '../../shared/provisioning/promotion';
import type { ProvisioningServiceOptions } from '../../shared/provisioning/provisioning.service';
import { parseSourcePolicy } from '../../shared/provisioning/source-policy';
import { realLocalPath } from '../../shared/platform/git/desired-state';
import type { TestHost } from './local-host';

/**
 * The example desired state for provisioning tests: the example project, plus copies of its development and
 * production stack files under numbered names (`development-3`, `production-3`), so each test promotes to stacks of
 * its own in one shared database.
 */

/** The tenant of the example's promotions (`examplePromotion`). */
export const EXAMPLE_TENANT = 'demo-team';
/** The example's project: the `name` of its `Pulumi.yaml`. */
export const EXAMPLE_PROJECT = 'demo-app';
/** The project `addPoolProject` adds. */
export const POOL_PROJECT = 'worker-pool';

/** A stack as locks, states and the local cloud key it: of the example's project and tenant unless told otherwise. */
export function exampleStack(stack: string, project = EXAMPLE_PROJECT, tenant = EXAMPLE_TENANT): StackRef {
  return { tenant, project, stack };
}

/** `tenant/project/stack` of `exampleStack`, as views, events and pool definitions name a stack. */
export function qualifiedExampleStack(stack: string, project = EXAMPLE_PROJECT, tenant = EXAMPLE_TENANT): string {
  return qualifiedStackName(exampleStack(stack, project, tenant));
}

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

/** The folder of the worker-pool project `addPoolProject` adds to the example. */
export const POOL_PROJECT_PATH = 'pools';

/**
 * Adds a worker-pool project (folder `pools`) to the example's source and commits it: one `local:compute:WorkerPool`
 * whose size is the config `poolSize`, the key a pool resize sets.
 */
export async function addPoolProject(example: ProvisioningExample): Promise<ExampleRepository> {
  const folder = join(example.source, POOL_PROJECT_PATH);
  fs.mkdirSync(folder, { recursive: true });
  fs.writeFileSync(
    join(folder, 'Pulumi.yaml'),
    [
      `name: ${POOL_PROJECT}`,
      'runtime: yaml',
      'config:',
      '  poolSize:',
      '    type: integer',
      '    default: 2',
      'resources:',
      '  workers:',
      '    type: local:compute:WorkerPool',
      '    properties:',
      '      kind: build',
      '      size: ${poolSize}',
      '',
    ].join('\n'),
  );
  return example.commit();
}

/** A development promotion of the worker-pool project onto `stack`, in an environment of its own. */
export function aPoolPromotion(repository: ExampleRepository, stack: string): PromotionApproved {
  const base = aStackPromotion(repository, 'development', { stack });
  return { ...base, desiredState: { ...base.desiredState, path: POOL_PROJECT_PATH } };
}

/** A `PoolResizeRequested` as the capacity module publishes it (a CloudEvent on the events topic); `iacStack` is `tenant/project/stack`. */
export function aPoolResizeEvent(resize: { id: string; pool: string; iacStack: string; fromCapacity: number; toCapacity: number }): Record<string, unknown> {
  return {
    specversion: '1.0',
    id: resize.id,
    source: '/runtime-cloud',
    type: 'PoolResizeRequested',
    subject: `pools/${resize.pool}`,
    time: '2026-03-01T09:00:00.000Z',
    datacontenttype: 'application/json',
    correlationid: resize.pool,
    data: { pool: resize.pool, kind: 'build', target: 'local', iacStack: resize.iacStack, fromCapacity: resize.fromCapacity, toCapacity: resize.toCapacity, used: 0 },
  };
}

/** The queue promotions arrive on. */
export const PROMOTIONS_QUEUE = 'runtime-cloud-promotions';

/** Puts a message on the host's promotions queue through the local-only endpoint (a PlatformAdmin token). */
export async function sendToPromotions(host: TestHost, body: unknown, messageId: string): Promise<void> {
  const response = await host.fetch(`/runtime-cloud/local/queues/${PROMOTIONS_QUEUE}/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ body, messageId }),
    claims: { roles: ['PlatformAdmin'] },
  });
  // Thrown rather than expect(): the benchmarks use this file too, outside vitest.
  if (response.status !== 200 && response.status !== 201) throw new Error(`sending to ${PROMOTIONS_QUEUE} answered ${response.status}: ${await response.text()}`);
}

/**
 * The options of a provisioning service as the integration tests build it: the local engine over `cloud`, the
 * local external services and a Git cache under `root`, the tenant `demo-team` only.
 */
export function testServiceOptions(store: SqlStore, clock: Clock, cloud: LocalCloud, root: string): ProvisioningServiceOptions {
  return {
    store,
    clock,
    ids: randomIds,
    engine: localIacRunner({ store, clock, ids: randomIds, cloud }),
    services: createLocalExternalServices({ store, clock, stateDir: join(root, 'state') }),
    knowsTenant: (tenant) => Promise.resolve(tenant === 'demo-team'),
    desiredState: { cacheDir: join(root, 'git-cache') },
    // Every tenant may promote from repositories under the test's own folder, as the local host allows its state dir's.
    sources: testSources(root),
    projects: { runtimes: ['yaml'] },
    // The packages the local host allows, as it parses them.
    packages: { packages: settings.RuntimeCloud__Provisioning__Packages.parse(LOCAL_PACKAGES) },
    hostId: 'test-host',
    // As the local host: its DeliveryHost stand-in pins no release unless the test writes a delivery.json.
    unpinnedReleases: 'allow',
  };
}

/** A source policy that allows local repositories under `root` (and nothing else) to every tenant. */
export function testSources(root: string): ProvisioningServiceOptions['sources'] {
  return { policy: parseSourcePolicy({ '*': [{ prefix: `${pathToFileURL(realLocalPath(root)).href}/` }] }), local: { localSources: true, realPath: realLocalPath } };
}

/** The events with this correlation id (a run, a promotion, a message) in the outbox, in order. */
export async function outboxEvents(store: SqlStore, correlationId: string): Promise<CloudEvent[]> {
  const rows = await store.db.selectFrom('outbox').select('payload').where('correlation_id', '=', correlationId).orderBy('seq').execute();
  return rows.map((r) => JSON.parse(String(r.payload)) as CloudEvent);
}
