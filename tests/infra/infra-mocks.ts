import { createRequire } from 'node:module';
import { join } from 'node:path';
import { expect } from 'vitest';

/**
 * Runs the Pulumi program of infra/ in-process under Pulumi's runtime mocks (`pulumi.runtime.setMocks`) and records
 * every resource it declares with its resolved inputs. No Azure and no `pulumi` CLI: what Azure would accept or do
 * with these inputs is out of reach here (infra/README.md). One run per test file: the Pulumi runtime is
 * process-wide, and vitest gives each file its own process.
 */

const INFRA = join(__dirname, '..', '..', 'infra');
// The program's own copy of the SDK (infra/node_modules after `cd infra && npm install`, else the root's): mocks set
// on another copy would never see its resources.
const pulumi = createRequire(join(INFRA, 'index.ts'))('@pulumi/pulumi') as typeof import('@pulumi/pulumi');

export const PROJECT = 'runtime-cloud-host';
export const SUBSCRIPTION_ID = '00000000-0000-4000-8000-000000000001';
export const TENANT_ID = '00000000-0000-4000-8000-000000000002';
export const APP_PRINCIPAL_ID = '00000000-0000-4000-8000-0000000000aa';
export const SQL_ADMIN_GROUP = '00000000-0000-4000-8000-0000000000bb';
/** The values of the seed's secrets, as Pulumi config secrets. */
export const SECRET_VALUES = { runtimeCloudSql: 'sql-secret-value-1', iacRunnerIdentity: 'runner-secret-value-2', messagingTransport: 'bus-secret-value-3' };
export const ROTATED_ON = { 'runtime-cloud-sql': '2026-11-02', 'iac-runner-identity': '2026-11-20', 'messaging-transport': '2026-10-15' };
export const TARGETS = [{ id: 'prod-sub', kind: 'azure-subscription', name: 'Production', location: 'westeurope' }];

/** A stack's configuration that deploys: keys without the project prefix, values as `pulumi config set` stores them. */
export function validConfig(): Record<string, string> {
  return {
    sqlAdminGroupObjectId: SQL_ADMIN_GROUP,
    authIssuer: 'https://login.example.test/issuer',
    authAudience: 'api://runtime-cloud',
    authJwksUrl: 'https://login.example.test/keys',
    targets: JSON.stringify(TARGETS),
    iacRunnerClientId: '00000000-0000-4000-8000-0000000000cc',
    secretsRotatedOn: JSON.stringify(ROTATED_ON),
    ...SECRET_VALUES,
  };
}

export interface Declared {
  readonly type: string;
  /** The physical name: its own `<kind>Name` input, else its logical name (the mocks do no auto-naming). */
  readonly name: string;
  readonly id: string;
  /** Inputs with secrets revealed. */
  readonly inputs: Readonly<Record<string, unknown>>;
  /** Paths of the inputs that the program passed as secrets. */
  readonly secretPaths: readonly string[];
}

export type InfraProgram = typeof import('../../infra/index.js');

/**
 * Runs the program with `config` (the secret keys of `SECRET_VALUES` are set as secrets). Resolves once every
 * resource registration has been answered; rejects with the program's own error when it fails.
 */
export async function runInfra(config: Record<string, string>): Promise<{ declared: Declared[]; program: InfraProgram }> {
  const secretKeys = Object.keys(SECRET_VALUES).filter((key) => key in config);
  pulumi.runtime.setAllConfig(
    Object.fromEntries(Object.entries(config).map(([key, value]) => [`${PROJECT}:${key}`, value])),
    secretKeys.map((key) => `${PROJECT}:${key}`),
  );
  const declared: Declared[] = [];
  await pulumi.runtime.setMocks(
    {
      newResource({ type, name, inputs }) {
        const id = `/mock/${type}/${name}`;
        const secretPaths: string[] = [];
        const revealed = reveal(inputs, '', secretPaths) as Record<string, unknown>;
        const physical = physicalName(type, revealed, name);
        declared.push({ type, name: physical, id, inputs: revealed, secretPaths });
        const state: Record<string, unknown> = { ...inputs, name: revealed.name ?? physical };
        if (type === 'azure-native:web:WebApp') {
          // Azure fills in the principal of a system-assigned identity, and only when one is asked for.
          const identity = revealed.identity as { type?: string } | undefined;
          if (identity?.type === 'SystemAssigned') state.identity = { ...identity, principalId: APP_PRINCIPAL_ID, tenantId: TENANT_ID };
          state.defaultHostName = `${physical}.azurewebsites.net`;
        }
        if (type === 'azure-native:sql:Server') state.fullyQualifiedDomainName = `${physical}.database.windows.net`;
        if (type === 'azure-native:applicationinsights:Component') {
          state.connectionString = 'InstrumentationKey=00000000-0000-4000-8000-0000000000dd;IngestionEndpoint=https://westeurope-0.in.applicationinsights.azure.com/';
        }
        return { id, state };
      },
      call({ token }) {
        if (token === 'azure-native:authorization:getClientConfig') {
          return { clientId: 'deployer', objectId: 'deployer-object', subscriptionId: SUBSCRIPTION_ID, tenantId: TENANT_ID };
        }
        throw new Error(`unexpected call ${token}`);
      },
    },
    PROJECT,
    'test',
  );
  const program = await import('../../infra/index.js');
  await Promise.all([program.functionAppName, program.sqlUserToCreate, program.keyVaultName].map((o) => valueOf(o)));
  // Every registration is in flight by now; this waits for the mocks to have answered all of them.
  await pulumi.runtime.disconnect();
  return { declared, program };
}

function valueOf<T>(output: import('@pulumi/pulumi').Output<T>): Promise<T> {
  return new Promise((resolve) => output.apply((value) => resolve(value)));
}

/** The input at a dotted path (`siteConfig.linuxFxVersion`, `profiles.0.capacity`). */
export function field(resource: Declared, path: string): unknown {
  return path
    .split('.')
    .reduce<unknown>((value, key) => (value !== null && typeof value === 'object' ? (value as Record<string, unknown>)[key] : undefined), resource.inputs);
}

/** A string input; anything else fails the test. */
export function text(resource: Declared, path: string): string {
  const value = field(resource, path);
  expect(typeof value, `${resource.name}.${path}`).toBe('string');
  return value as string;
}

/** `value` with Pulumi's secret wrappers removed; the path of each wrapper is pushed to `secretPaths`. */
function reveal(value: unknown, path: string, secretPaths: string[]): unknown {
  if (Array.isArray(value)) return value.map((v, i) => reveal(v, `${path}[${i}]`, secretPaths));
  if (value === null || typeof value !== 'object') return value;
  const record = value as Record<string, unknown>;
  if (record[pulumi.runtime.specialSigKey] === pulumi.runtime.specialSecretSig) {
    secretPaths.push(path);
    return reveal(record.value, path, secretPaths);
  }
  return Object.fromEntries(Object.entries(record).map(([k, v]) => [k, reveal(v, path ? `${path}.${k}` : k, secretPaths)]));
}

function physicalName(type: string, inputs: Readonly<Record<string, unknown>>, logicalName: string): string {
  const kind = type.split(':').pop() ?? '';
  const own = inputs[`${kind.charAt(0).toLowerCase()}${kind.slice(1)}Name`];
  return typeof own === 'string' ? own : logicalName;
}
